#include "daemon/text/jinja/py_format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "daemon/text/jinja/errors.h"
#include "daemon/text/jinja/py_text.h"

namespace niels::daemon::text::jinja {
namespace {

// Appends to a string and stops (kLimit) past max_bytes.
class BoundedText {
 public:
  explicit BoundedText(size_t max_bytes) : max_bytes_(max_bytes) {}
  void Put(std::string_view s) {
    if (out_.size() + s.size() > max_bytes_) {
      ThrowLimit("a value's text is longer than the output limit (" + std::to_string(max_bytes_) + " bytes)");
    }
    out_.append(s);
  }
  void Put(char c) { Put(std::string_view(&c, 1)); }
  std::string Take() { return std::move(out_); }

 private:
  size_t max_bytes_;
  std::string out_;
};

void WriteRepr(BoundedText& w, const Value& v);

void WriteStr(BoundedText& w, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return;
    case Value::Kind::kString:
      w.Put(v.as_string());
      return;
    case Value::Kind::kObject: {
      const Object& o = v.as_object();
      if (o.loop_items) {
        w.Put("<LoopContext " + std::to_string(o.loop_index + 1) + "/" + std::to_string(o.loop_items->size()) + ">");
        return;
      }
      w.Put("<" + o.type_name + " {");
      bool first = true;
      for (const auto& [key, value] : o.attributes.items()) {
        if (!first) w.Put(", ");
        first = false;
        WriteRepr(w, key);
        w.Put(": ");
        WriteRepr(w, value);
      }
      w.Put("}>");
      return;
    }
    default:
      WriteRepr(w, v);
      return;
  }
}

void WriteRepr(BoundedText& w, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      w.Put("Undefined");
      return;
    case Value::Kind::kNone:
      w.Put("None");
      return;
    case Value::Kind::kBool:
      w.Put(v.as_bool() ? "True" : "False");
      return;
    case Value::Kind::kInt:
      w.Put(std::to_string(v.as_int()));
      return;
    case Value::Kind::kFloat:
      w.Put(PyReprFloat(v.as_float()));
      return;
    case Value::Kind::kString:
      w.Put(PyReprString(v.as_string()));
      return;
    case Value::Kind::kList: {
      const List& list = v.as_list();
      w.Put(list.is_tuple ? '(' : '[');
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i > 0) w.Put(", ");
        WriteRepr(w, list.items[i]);
      }
      if (list.is_tuple && list.items.size() == 1) w.Put(',');
      w.Put(list.is_tuple ? ')' : ']');
      return;
    }
    case Value::Kind::kDict: {
      w.Put('{');
      bool first = true;
      for (const auto& [key, value] : v.as_dict().items()) {
        if (!first) w.Put(", ");
        first = false;
        WriteRepr(w, key);
        w.Put(": ");
        WriteRepr(w, value);
      }
      w.Put('}');
      return;
    }
    case Value::Kind::kCallable:
      w.Put("<function " + v.as_callable()->name + ">");
      return;
    case Value::Kind::kObject:
      WriteStr(w, v);
      return;
  }
}

void WriteJsonString(BoundedText& w, std::string_view s, bool ensure_ascii) {
  w.Put('"');
  size_t run = 0;  // start of the bytes not yet written
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\' && (c < 0x80 || !ensure_ascii)) {
      ++i;
      continue;
    }
    w.Put(s.substr(run, i - run));
    char buf[16];
    switch (c) {
      case '"':
        w.Put("\\\"");
        break;
      case '\\':
        w.Put("\\\\");
        break;
      case '\n':
        w.Put("\\n");
        break;
      case '\r':
        w.Put("\\r");
        break;
      case '\t':
        w.Put("\\t");
        break;
      case '\b':
        w.Put("\\b");
        break;
      case '\f':
        w.Put("\\f");
        break;
      default:
        if (c < 0x80) {
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          w.Put(buf);
        } else {
          // ensure_ascii: the code point as \uXXXX, above U+FFFF as a surrogate pair.
          size_t n;
          char32_t cp = CodePointAt(s, i, &n);
          if (cp >= 0x10000) {
            cp -= 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
          }
          w.Put(buf);
          i += n;
          run = i;
          continue;
        }
    }
    ++i;
    run = i;
  }
  w.Put(s.substr(run));
  w.Put('"');
}

std::string JsonFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return PyReprFloat(d);
}

std::string JsonKey(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString:
      return key.as_string();
    case Value::Kind::kFloat:
      return JsonFloat(key.as_float());
    case Value::Kind::kBool:
      return key.as_bool() ? "true" : "false";
    case Value::Kind::kInt:
      return std::to_string(key.as_int());
    case Value::Kind::kNone:
      return "null";
    default:
      ThrowRender("keys must be str, int, float, bool or None, not " + key.TypeName());
  }
}

// Python's sorted() of dict keys: numbers with numbers, str with str; a mix is a TypeError.
bool KeyLess(const Value& a, const Value& b) {
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_number() && b.is_number()) return a.ToDouble() < b.ToDouble();
  ThrowRender("'<' not supported between instances of '" + b.TypeName() + "' and '" + a.TypeName() + "'");
}

void WriteJson(BoundedText& w, const Value& v, const JsonOptions& o, int level) {
  auto newline = [&](int depth) {
    w.Put('\n');
    for (int i = 0; i < depth; ++i) w.Put(*o.indent);
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      w.Put("null");
      return;
    case Value::Kind::kBool:
      w.Put(v.as_bool() ? "true" : "false");
      return;
    case Value::Kind::kInt:
      w.Put(std::to_string(v.as_int()));
      return;
    case Value::Kind::kFloat:
      w.Put(JsonFloat(v.as_float()));
      return;
    case Value::Kind::kString:
      WriteJsonString(w, v.as_string(), o.ensure_ascii);
      return;
    case Value::Kind::kList: {
      const auto& items = v.as_list().items;
      if (items.empty()) return w.Put("[]");
      w.Put('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) w.Put(o.item_separator);
        if (o.indent) newline(level + 1);
        WriteJson(w, items[i], o, level + 1);
      }
      if (o.indent) newline(level);
      w.Put(']');
      return;
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& item : v.as_dict().items()) items.push_back(&item);
      if (items.empty()) return w.Put("{}");
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return KeyLess(a->first, b->first); });
      }
      w.Put('{');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) w.Put(o.item_separator);
        if (o.indent) newline(level + 1);
        WriteJsonString(w, JsonKey(items[i]->first), o.ensure_ascii);
        w.Put(o.key_separator);
        WriteJson(w, items[i]->second, o, level + 1);
      }
      if (o.indent) newline(level);
      w.Put('}');
      return;
    }
    default:
      ThrowRender("Object of type " + v.TypeName() + " is not JSON serializable");
  }
}

}  // namespace

std::string PyStr(const Value& value, size_t max_bytes) {
  if (value.is_string()) {
    if (value.as_string().size() > max_bytes) BoundedText(max_bytes).Put(value.as_string());
    return value.as_string();
  }
  BoundedText w(max_bytes);
  WriteStr(w, value);
  return w.Take();
}

std::string PyRepr(const Value& value, size_t max_bytes) {
  BoundedText w(max_bytes);
  WriteRepr(w, value);
  return w.Take();
}

std::string ToJson(const Value& value, const JsonOptions& options, size_t max_bytes) {
  BoundedText w(max_bytes);
  WriteJson(w, value, options, 0);
  return w.Take();
}

Value FromJson(const nlohmann::ordered_json& json, int max_depth) {
  if (max_depth < 0) ThrowLimit("the context nests deeper than the depth limit");
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::MakeNone();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) ThrowRender("integer " + std::to_string(u) + " is out of range");
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string: {
      const std::string& s = json.get_ref<const std::string&>();
      if (!IsValidUtf8(s)) ThrowRender("a string in the context is not valid UTF-8");
      return Value(s);
    }
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item, max_depth - 1));
      return Value::MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value dict = Value::MakeDict();
      for (const auto& [key, item] : json.items()) dict.mutable_dict().Set(Value(key), FromJson(item, max_depth - 1));
      return dict;
    }
    default:
      ThrowRender("unsupported JSON value in the context");
  }
}

}  // namespace niels::daemon::text::jinja
