#include "serving/infer_json_scanner.h"

#include <charconv>
#include <cmath>
#include <system_error>
#include <utility>

namespace shadowsync::serving {
namespace {

// Deeper nesting than a request needs is left to the full parser (which
// refuses past its own limit).
constexpr int kMaxDepth = 8;

class Scanner {
 public:
  explicit Scanner(std::string_view s) : s_(s) {}

  std::optional<ScannedRequest> Request() {
    ScannedRequest r;
    bool id = false, inputs = false, outputs = false;
    const bool ok = Object([&](std::string_view key) {
      if (key == "id") return !Repeated(id) && String(&r.id);
      if (key == "inputs") {
        return !Repeated(inputs) && Array([&] {
          r.inputs.emplace_back();
          return Input(&r.inputs.back());
        });
      }
      if (key == "outputs") return !Repeated(outputs) && Array([&] { return Output(&r); });
      return Skip(1);
    });
    if (!ok || !inputs || !AtEnd()) return std::nullopt;
    return r;
  }

 private:
  // True if `seen` was already set (a duplicate key); sets it.
  static bool Repeated(bool& seen) { return std::exchange(seen, true); }

  void Space() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n' || s_[p_] == '\r'))
      ++p_;
  }
  bool Eat(char c) {
    Space();
    if (p_ < s_.size() && s_[p_] == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool Next(char c) {
    Space();
    return p_ < s_.size() && s_[p_] == c;
  }
  bool AtEnd() {
    Space();
    return p_ == s_.size();
  }

  // `{ "key": value, ... }`, each value read by member(key).
  template <typename Member>
  bool Object(Member member) {
    if (!Eat('{')) return false;
    if (Eat('}')) return true;
    std::string key;
    do {
      if (!String(&key) || !Eat(':') || !member(std::string_view(key))) return false;
    } while (Eat(','));
    return Eat('}');
  }
  // `[ item, ... ]`, each read by item().
  template <typename Item>
  bool Array(Item item) {
    if (!Eat('[')) return false;
    if (Eat(']')) return true;
    do {
      if (!item()) return false;
    } while (Eat(','));
    return Eat(']');
  }

  bool Input(ScannedTensor* t) {
    bool name = false, datatype = false, shape = false, data = false;
    const bool ok = Object([&](std::string_view key) {
      if (key == "name") return !Repeated(name) && String(&t->name);
      if (key == "datatype") return !Repeated(datatype) && String(&t->datatype);
      if (key == "shape") {
        return !Repeated(shape) && Array([&] {
          ScannedTensor::Number n;
          if (!Number(&n) || !n.is_integer) return false;
          t->shape.push_back(n.integer);
          return true;
        });
      }
      if (key == "data") return !Repeated(data) && Data(t, 1);
      return Skip(2);
    });
    return ok && name && datatype && shape && data;
  }

  bool Output(ScannedRequest* r) {
    bool named = false;
    std::string name;
    const bool ok = Object([&](std::string_view key) {
      if (key == "name") return !Repeated(named) && String(&name);
      return Skip(2);
    });
    if (name != "probability") r->outputs_ok = false;
    return ok && named;
  }

  // A tensor's data, nested arrays flattened.
  bool Data(ScannedTensor* t, int depth) {
    if (depth > kMaxDepth) return false;
    return Array([&] {
      if (Next('[')) return Data(t, depth + 1);
      if (Next('"')) {
        t->strings.emplace_back();
        return t->numbers.empty() && String(&t->strings.back());
      }
      t->numbers.emplace_back();
      return t->strings.empty() && Number(&t->numbers.back());
    });
  }

  // A string without \u escapes, control or non-ASCII bytes (which the full
  // parser decodes, or refuses, itself).
  bool String(std::string* out) {
    if (!Eat('"')) return false;
    out->clear();
    while (p_ < s_.size()) {
      const char c = s_[p_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x80) {
        return false;
      }
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (p_ == s_.size()) return false;
      switch (s_[p_++]) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        default:
          return false;  // \u, or not an escape
      }
    }
    return false;
  }

  // A JSON number (RFC 8259's grammar, checked here: from_chars alone would
  // take "01" or "1."), an integer if it has no fraction or exponent.
  bool Number(ScannedTensor::Number* n) {
    Space();
    const size_t begin = p_;
    auto digits = [&] {
      const size_t from = p_;
      while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') ++p_;
      return p_ - from;
    };
    if (p_ < s_.size() && s_[p_] == '-') ++p_;
    const size_t int_begin = p_;
    const size_t int_digits = digits();
    if (int_digits == 0 || (int_digits > 1 && s_[int_begin] == '0')) return false;
    bool integer = true;
    if (p_ < s_.size() && s_[p_] == '.') {
      ++p_;
      if (digits() == 0) return false;
      integer = false;
    }
    if (p_ < s_.size() && (s_[p_] == 'e' || s_[p_] == 'E')) {
      ++p_;
      if (p_ < s_.size() && (s_[p_] == '+' || s_[p_] == '-')) ++p_;
      if (digits() == 0) return false;
      integer = false;
    }
    const char* first = s_.data() + begin;
    const char* last = s_.data() + p_;
    n->is_integer = integer;
    if (integer) {
      // Out of int64 range the full parser keeps an unsigned or a double.
      const auto [end, ec] = std::from_chars(first, last, n->integer);
      return ec == std::errc() && end == last;
    }
    const auto [end, ec] = std::from_chars(first, last, n->real);
    return ec == std::errc() && end == last && std::isfinite(n->real);
  }

  // Any value, read for its syntax only.
  bool Skip(int depth) {
    if (depth > kMaxDepth) return false;
    Space();
    if (p_ == s_.size()) return false;
    std::string scratch;
    switch (s_[p_]) {
      case '{':
        return Object([&](std::string_view) { return Skip(depth + 1); });
      case '[':
        return Array([&] { return Skip(depth + 1); });
      case '"':
        return String(&scratch);
      case 't':
        return Word("true");
      case 'f':
        return Word("false");
      case 'n':
        return Word("null");
      default: {
        ScannedTensor::Number n;
        return Number(&n);
      }
    }
  }
  bool Word(std::string_view w) {
    if (s_.substr(p_, w.size()) != w) return false;
    p_ += w.size();
    return true;
  }

  const std::string_view s_;
  size_t p_ = 0;
};

}  // namespace

std::optional<ScannedRequest> ScanInferRequest(std::string_view body) {
  return Scanner(body).Request();
}

}  // namespace shadowsync::serving
