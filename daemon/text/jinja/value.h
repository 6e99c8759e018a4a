#pragma once
// Value: a Jinja/Python value as chat templates see it.
//
// Kinds mirror the Python objects a template meets under Jinja2: Undefined (Jinja2's default
// Undefined: prints empty, is falsy, iterates as empty, fails on most other uses), None, bool,
// int (64-bit; Python's are unbounded, ours report overflow as an error), float (double), str
// (UTF-8; indexed, sliced and measured by code point like Python's str), list and tuple, dict
// (insertion-ordered, keys str/int/float/bool/None), callable (filters' functions, string
// methods bound to their object, macros, globals) and object (attribute bags: `namespace()`,
// the `loop` variable).
//
// Lists, dicts and objects are shared by reference like Python objects: copying a Value copies a
// pointer. Templates cannot mutate lists or dicts (the environment is Jinja2's immutable sandbox);
// only a namespace object takes attribute assignment.
//
// Threading: a Value is not synchronized; the values of one render belong to that render.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace niels::daemon::text::jinja {

class Value;
class Dict;
struct List;
struct Callable;
struct Object;

// What Jinja2 says when an undefined value is used: "'x' is undefined",
// "'dict object' has no attribute 'x'".
struct Undefined {
  std::string hint;
};
struct None {};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable, kObject };

  Value() : v_(Undefined{}) {}  // undefined
  static Value MakeUndefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value MakeNone() { return Value(None{}); }
  Value(bool b) : v_(b) {}                                  // NOLINT: implicit by design
  Value(int64_t i) : v_(i) {}                               // NOLINT
  Value(int i) : v_(int64_t{i}) {}                          // NOLINT
  Value(double d) : v_(d) {}                                // NOLINT
  Value(std::string s) : v_(std::move(s)) {}                // NOLINT
  Value(std::string_view s) : v_(std::string(s)) {}         // NOLINT
  Value(const char* s) : v_(std::string(s)) {}              // NOLINT
  Value(std::shared_ptr<List> l) : v_(std::move(l)) {}      // NOLINT
  Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}      // NOLINT
  Value(std::shared_ptr<Callable> c) : v_(std::move(c)) {}  // NOLINT
  Value(std::shared_ptr<Object> o) : v_(std::move(o)) {}    // NOLINT

  // A new list (or tuple) holding `items`.
  static Value MakeList(std::vector<Value> items, bool tuple = false);
  static Value MakeDict();

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // int, float or bool (Python's bool is an int).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }  // list or tuple
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_callable() const { return kind() == Kind::kCallable; }
  bool is_object() const { return kind() == Kind::kObject; }

  // REQUIRES: the matching kind.
  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return *std::get<std::shared_ptr<List>>(v_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  Dict& mutable_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  const std::shared_ptr<Callable>& as_callable() const { return std::get<std::shared_ptr<Callable>>(v_); }
  Object& as_object() const { return *std::get<std::shared_ptr<Object>>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }
  // A number as double. REQUIRES: is_number().
  double ToDouble() const;

  // Python truthiness (Undefined and None are false; empty str, list, dict are false).
  bool Truthy() const;
  // True when both are the same list/dict/object/callable (Python `is`), or equal scalars of one
  // kind.
  bool SameAs(const Value& other) const;

  // Python's type name ("str", "int", "list", "tuple", "dict", "NoneType", "Undefined", ...), as
  // Jinja2's error messages use them.
  std::string TypeName() const;

  // Nesting of lists and dicts (0 for anything else; see List), and whether a namespace or loop
  // object is this value or inside it.
  uint32_t Depth() const;
  bool HoldsObject() const;

 private:
  explicit Value(Undefined u) : v_(std::move(u)) {}
  explicit Value(None n) : v_(n) {}

  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<List>, std::shared_ptr<Dict>,
               std::shared_ptr<Callable>, std::shared_ptr<Object>>
      v_;
};

// Lists and dicts cannot change after they are made (the immutable sandbox), so their nesting is
// known when they are made: `depth` (1 + the deepest child list or dict) and `holds_object`
// (whether a namespace or loop object is inside, at any depth). Making a value nested deeper than
// kMaxValueDepth is a limit error: every recursive walk of values (printing, JSON, comparisons,
// destruction) stays shallow, whatever a template builds.
inline constexpr uint32_t kMaxValueDepth = 200;

struct List {
  std::vector<Value> items;
  bool is_tuple = false;
  uint32_t depth = 1;
  bool holds_object = false;
};

// An insertion-ordered dict. Keys are scalars or tuples of them, compared as Python does (1, 1.0
// and True are the same key; "1" is another).
class Dict {
 public:
  // The value for `key`, or nullptr.
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  // Inserts or replaces (keeping the first insertion's position, as Python does).
  void Set(const Value& key, Value value);
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }

  // False for keys Python could not hash in a dict (lists, dicts, Undefined...).
  static bool IsHashableKey(const Value& key);

  // See List. Set() keeps them up to date.
  uint32_t depth() const { return depth_; }
  bool holds_object() const { return holds_object_; }

 private:
  // Dicts this small are searched in order; larger ones get an index (a message has 2-5 keys, a
  // tool schema can have thousands).
  static constexpr size_t kIndexFrom = 12;

  std::vector<std::pair<Value, Value>> items_;
  std::unordered_map<std::string, size_t> index_;  // canonical key -> position; empty while small
  uint32_t depth_ = 1;
  bool holds_object_ = false;
};

// An attribute bag: `namespace(...)` (writable), or the `loop` variable of a for loop, whose
// attributes (index, first, nextitem...) are computed from the loop's items and position.
struct Object {
  std::string type_name;  // "Namespace", "LoopContext"
  bool writable = false;
  Dict attributes;
  std::shared_ptr<const std::vector<Value>> loop_items;  // LoopContext: what the loop iterates
  size_t loop_index = 0;                                 // LoopContext: index0 of this iteration
};

// Arguments of a call: positional, then keyword in the order written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

class Evaluator;

// A callable value. `fn` gets the evaluator (for limits, output and nested calls); it reports
// errors by throwing JinjaError (errors.h), which the render converts to a Status.
struct Callable {
  std::string name;
  std::function<Value(Evaluator&, CallArgs&)> fn;
  Value bound_self;  // a bound method's object (`s.upper`), else undefined
};

}  // namespace niels::daemon::text::jinja
