#include "daemon/text/jinja/value.h"

#include <algorithm>
#include <cmath>

#include "daemon/text/jinja/errors.h"
#include "daemon/text/jinja/py_text.h"

namespace niels::daemon::text::jinja {
namespace {

// One string per Python-equal key: 1, 1.0 and True share "i1".
std::string CanonicalKey(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kBool:
      return key.as_bool() ? "i1" : "i0";
    case Value::Kind::kInt:
      return std::string("i").append(std::to_string(key.as_int()));
    case Value::Kind::kFloat: {
      const double d = key.as_float();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
        return std::string("i").append(std::to_string(static_cast<int64_t>(d)));
      }
      return std::string("f").append(PyReprFloat(d));
    }
    case Value::Kind::kString:
      return "s" + key.as_string();
    case Value::Kind::kNone:
      return "n";
    case Value::Kind::kList: {  // a tuple of hashable values (IsHashableKey)
      std::string out = "t";
      for (const Value& item : key.as_list().items) {
        const std::string part = CanonicalKey(item);
        out.append(std::to_string(part.size())).append(":").append(part);
      }
      return out;
    }
    default:
      return std::string();
  }
}

}  // namespace

namespace {

void CheckDepth(uint32_t depth) {
  if (depth > kMaxValueDepth) {
    ThrowLimit("a value nests lists and dicts deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
}

}  // namespace

Value Value::MakeList(std::vector<Value> items, bool tuple) {
  auto list = std::make_shared<List>();
  for (const Value& item : items) {
    list->depth = std::max(list->depth, item.Depth() + 1);
    list->holds_object = list->holds_object || item.HoldsObject();
  }
  CheckDepth(list->depth);
  list->items = std::move(items);
  list->is_tuple = tuple;
  return Value(std::move(list));
}

uint32_t Value::Depth() const {
  if (is_list()) return as_list().depth;
  if (is_dict()) return as_dict().depth();
  return 0;
}

bool Value::HoldsObject() const {
  if (is_list()) return as_list().holds_object;
  if (is_dict()) return as_dict().holds_object();
  if (is_callable()) return as_callable()->bound_self.HoldsObject();
  return is_object();
}

Value Value::MakeDict() { return Value(std::make_shared<Dict>()); }

double Value::ToDouble() const {
  if (is_float()) return as_float();
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  return static_cast<double>(as_int());
}

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !as_list().items.empty();
    case Kind::kDict:
      return !as_dict().empty();
    case Kind::kCallable:
    case Kind::kObject:
      return true;
  }
  return false;
}

bool Value::SameAs(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return as_bool() == other.as_bool();
    case Kind::kInt:
      return as_int() == other.as_int();
    case Kind::kFloat:
      return as_float() == other.as_float();
    case Kind::kString:
      return as_string() == other.as_string();
    case Kind::kList:
      return &as_list() == &other.as_list();
    case Kind::kDict:
      return &as_dict() == &other.as_dict();
    case Kind::kCallable:
      return as_callable() == other.as_callable();
    case Kind::kObject:
      return &as_object() == &other.as_object();
  }
  return false;
}

std::string Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return as_list().is_tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kCallable:
      return "function";
    case Kind::kObject:
      return as_object().type_name;
  }
  return "object";
}

bool Dict::IsHashableKey(const Value& key) {
  if (key.is_list()) {  // a tuple is hashable when its items are; a list never
    if (!key.as_list().is_tuple) return false;
    for (const Value& item : key.as_list().items) {
      if (!IsHashableKey(item)) return false;
    }
    return true;
  }
  switch (key.kind()) {
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
    case Value::Kind::kString:
    case Value::Kind::kNone:
      return true;
    default:
      return false;
  }
}

namespace {

// Python's key equality for hashable scalars: numbers by value across int, float and bool; str
// with str; None with None.
bool KeysEqual(const Value& a, const Value& b) {
  if (a.is_string() || b.is_string()) return a.is_string() && b.is_string() && a.as_string() == b.as_string();
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_list() || b.is_list()) return a.is_list() && b.is_list() && CanonicalKey(a) == CanonicalKey(b);
  return a.ToDouble() == b.ToDouble() && CanonicalKey(a) == CanonicalKey(b);
}

}  // namespace

const Value* Dict::Find(const Value& key) const {
  if (!IsHashableKey(key)) return nullptr;
  if (index_.empty()) {
    for (const auto& [k, v] : items_) {
      if (KeysEqual(k, key)) return &v;
    }
    return nullptr;
  }
  auto it = index_.find(CanonicalKey(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Value* Dict::Find(std::string_view key) const {
  if (index_.empty()) {
    for (const auto& [k, v] : items_) {
      if (k.is_string() && k.as_string() == key) return &v;
    }
    return nullptr;
  }
  std::string canonical;
  canonical.reserve(key.size() + 1);
  canonical.push_back('s');
  canonical.append(key);
  auto it = index_.find(canonical);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

void Dict::Set(const Value& key, Value value) {
  depth_ = std::max(depth_, value.Depth() + 1);
  CheckDepth(depth_);
  holds_object_ = holds_object_ || value.HoldsObject();
  if (index_.empty()) {
    for (auto& [k, v] : items_) {
      if (KeysEqual(k, key)) {
        v = std::move(value);
        return;
      }
    }
    items_.emplace_back(key, std::move(value));
    if (items_.size() >= kIndexFrom) {
      for (size_t i = 0; i < items_.size(); ++i) index_.emplace(CanonicalKey(items_[i].first), i);
    }
    return;
  }
  std::string canonical = CanonicalKey(key);
  auto it = index_.find(canonical);
  if (it != index_.end()) {
    items_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(std::move(canonical), items_.size());
  items_.emplace_back(key, std::move(value));
}

}  // namespace niels::daemon::text::jinja
