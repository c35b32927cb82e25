// util/npy_header.cpp — Python's literal grammar, as much as ast.literal_eval takes, for .npy
// headers (the rules and where kiln is stricter: npy_header.h).
#include "util/npy_header.h"

#include <cctype>
#include <cstring>

#include "util/utf8.h"

namespace kiln {
namespace {

constexpr size_t kMaxHeaderChars = 10000;  // np.load's max_header_size
constexpr int kMaxNesting = 200;           // Python's parser refuses deeper brackets

// One literal, as much of it as the checks need.
struct Literal {
  enum Kind { kStr, kBytes, kInt, kBool, kNone, kFloat, kComplex, kEllipsis, kTuple, kList, kDict, kSet };
  Kind kind = kNone;
  std::string text;            // kStr (UTF-8), kBytes
  int64_t value = 0;           // kInt (unless too_big), kBool
  bool too_big = false;        // kInt beyond int64
  std::vector<Literal> items;  // kTuple, kList, kSet; kDict: key, value, key, value, ...
  size_t begin = 0, end = 0;   // where it was written, for messages
};

bool hashable(const Literal& v) {
  if (v.kind == Literal::kList || v.kind == Literal::kDict || v.kind == Literal::kSet) return false;
  for (const Literal& i : v.items)
    if (!hashable(i)) return false;
  return true;
}

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

class Parser {
 public:
  Parser(std::string_view text, bool long_suffix) : s_(text), long_suffix_(long_suffix) {}

  // The one literal the header holds, or false with error() set.
  bool parse(Literal& out) {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t')) ++p_;  // literal_eval's lstrip
    if (!skip_blank_lines(/*indent_ok=*/false)) return false;
    if (p_ >= s_.size()) return fail("the header is empty");
    if (!value(out)) return false;
    if (!skip_blank_lines(/*indent_ok=*/true)) return false;
    if (p_ < s_.size()) return fail("unexpected text after the dict at '" + excerpt(p_) + "'");
    return true;
  }
  const std::string& error() const { return error_; }
  std::string source(const Literal& v) const { return std::string(s_.substr(v.begin, v.end - v.begin)); }

 private:
  bool fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return false;
  }
  std::string excerpt(size_t at) const { return std::string(s_.substr(at, 12)); }
  char peek(size_t ahead = 0) const { return p_ + ahead < s_.size() ? s_[p_ + ahead] : '\0'; }

  // Outside brackets: blank and comment lines before and after the literal. A line whose literal
  // starts indented is Python's IndentationError.
  bool skip_blank_lines(bool indent_ok) {
    int col = 0;
    while (p_ < s_.size()) {
      const char c = s_[p_];
      if (c == ' ' || c == '\t') {
        ++col, ++p_;
      } else if (c == '\f') {
        col = 0, ++p_;
      } else if (c == '#') {
        while (p_ < s_.size() && s_[p_] != '\n' && s_[p_] != '\r') ++p_;
      } else if (c == '\n' || c == '\r') {
        col = 0, ++p_;
      } else if (c == '\\') {
        return fail("kiln does not read a line continuation (backslash-newline) outside a string");
      } else {
        return indent_ok || col == 0 || fail("the header's first line is indented");
      }
    }
    return true;
  }

  // Between tokens: inside brackets newlines and comments too.
  bool skip() {
    while (p_ < s_.size()) {
      const char c = s_[p_];
      if (c == ' ' || c == '\t' || c == '\f') {
        ++p_;
      } else if (depth_ > 0 && (c == '\n' || c == '\r')) {
        ++p_;
      } else if (depth_ > 0 && c == '#') {
        while (p_ < s_.size() && s_[p_] != '\n' && s_[p_] != '\r') ++p_;
      } else if (c == '\\' && (peek(1) == '\n' || peek(1) == '\r')) {
        return fail("kiln does not read a line continuation (backslash-newline) outside a string");
      } else {
        break;
      }
    }
    return true;
  }

  // A string prefix (r, u, b, f and their pairs) followed by a quote, or a bare quote.
  size_t string_prefix_length() const {
    size_t n = 0;
    while (n < 2 && std::isalpha(static_cast<unsigned char>(peek(n)))) ++n;
    return (peek(n) == '\'' || peek(n) == '"') ? n : SIZE_MAX;
  }

  bool value(Literal& out) {
    if (++depth_guard_ > kMaxNesting) return fail("kiln reads at most " + std::to_string(kMaxNesting) + " nested brackets");
    const size_t begin = p_;
    bool ok = false;
    const char c = peek();
    if (c == '(' || c == '[' || c == '{') {
      ok = brackets(out);
    } else if (string_prefix_length() != SIZE_MAX) {
      ok = strings(out);
    } else if (std::isdigit(static_cast<unsigned char>(c)) || (c == '.' && std::isdigit(static_cast<unsigned char>(peek(1)))) ||
               c == '+' || c == '-') {
      ok = signed_number(out);
    } else if (c == '.' && peek(1) == '.' && peek(2) == '.') {
      p_ += 3;
      out.kind = Literal::kEllipsis;
      ok = true;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      ok = name(out);
    } else {
      ok = fail(p_ < s_.size() ? "unexpected '" + excerpt(p_) + "'" : "the header ends inside the dict");
    }
    --depth_guard_;
    out.begin = begin;
    out.end = p_;
    return ok;
  }

  bool name(Literal& out) {
    const size_t b = p_;
    while (is_name_char(peek())) ++p_;
    const std::string_view n = s_.substr(b, p_ - b);
    if (n == "True" || n == "False") {
      out.kind = Literal::kBool;
      out.value = n == "True";
      return true;
    }
    if (n == "None") return out.kind = Literal::kNone, true;
    if (n == "set") {  // literal_eval's one call: set() for an empty set
      if (!skip()) return false;
      if (peek() == '(') {
        ++p_, ++depth_;
        if (!skip()) return false;
        if (peek() == ')') return ++p_, --depth_, out.kind = Literal::kSet, true;
      }
    }
    return fail("'" + std::string(n) + "' is not a literal");
  }

  // ( ), [ ], { }: a tuple or a value in parentheses, a list, a dict or a set.
  bool brackets(Literal& out) {
    const char open = s_[p_++];
    const char close = open == '(' ? ')' : open == '[' ? ']' : '}';
    ++depth_;
    out.kind = open == '(' ? Literal::kTuple : open == '[' ? Literal::kList : Literal::kDict;
    bool first = true, comma = false;
    for (;;) {
      if (!skip()) return false;
      if (peek() == close) break;
      if (!first && !comma) return fail(std::string("expected ',' or '") + close + "' at '" + excerpt(p_) + "'");
      Literal item;
      if (!value(item) || !skip()) return false;
      if (open == '{') {
        const bool pair = peek() == ':';
        if (first) out.kind = pair ? Literal::kDict : Literal::kSet;
        if (pair != (out.kind == Literal::kDict)) return fail("a dict and a set mixed at '" + excerpt(p_) + "'");
        if (!hashable(item)) return fail("unhashable " + source(item) + " in a dict or set");
        out.items.push_back(std::move(item));
        if (pair) {
          ++p_;
          Literal v;
          if (!skip() || !value(v) || !skip()) return false;
          out.items.push_back(std::move(v));
        }
      } else {
        out.items.push_back(std::move(item));
      }
      first = false;
      comma = peek() == ',';
      if (comma) ++p_;
    }
    ++p_, --depth_;
    // (x) is x, (x,) a tuple of one.
    if (open == '(' && out.items.size() == 1 && !comma) {
      Literal inner = std::move(out.items[0]);
      out = std::move(inner);
    }
    return true;
  }

  // Adjacent strings are one (str with str, bytes with bytes).
  bool strings(Literal& out) {
    bool first = true;
    while (string_prefix_length() != SIZE_MAX) {
      Literal one;
      if (!string(one)) return false;
      if (!first && one.kind != out.kind) return fail("str and bytes literals concatenated");
      out.kind = one.kind;
      out.text += one.text;
      first = false;
      if (!skip()) return false;
    }
    return true;
  }

  bool string(Literal& out) {
    std::string prefix;
    for (size_t n = string_prefix_length(); n > 0; --n) prefix += static_cast<char>(std::tolower(static_cast<unsigned char>(s_[p_++])));
    const bool raw = prefix.find('r') != std::string::npos, bytes = prefix.find('b') != std::string::npos;
    if (!(prefix.empty() || prefix == "r" || prefix == "u" || prefix == "b" || prefix == "br" || prefix == "rb" ||
          prefix == "f" || prefix == "fr" || prefix == "rf"))
      return fail("'" + prefix + "' is not a string prefix");
    if (prefix.find('f') != std::string::npos) return fail("an f-string is not a literal");
    out.kind = bytes ? Literal::kBytes : Literal::kStr;
    const char q = s_[p_];
    const bool triple = peek(1) == q && peek(2) == q;
    p_ += triple ? 3 : 1;
    for (;;) {
      if (p_ >= s_.size()) return fail("a string is not closed");
      const char c = s_[p_];
      if (c == q && (!triple || (peek(1) == q && peek(2) == q))) {
        p_ += triple ? 3 : 1;
        return true;
      }
      if ((c == '\n' || c == '\r') && !triple) return fail("a string is not closed on its line");
      if (bytes && static_cast<unsigned char>(c) >= 0x80) return fail("a bytes literal holds a non-ASCII character");
      if (c != '\\') {
        out.text += c;
        ++p_;
        continue;
      }
      if (p_ + 1 >= s_.size()) return fail("a string is not closed");
      if (raw) {  // the backslash stays; it only keeps the next character from closing the string
        out.text += s_.substr(p_, 2);
        p_ += 2;
        continue;
      }
      if (!escape(out.text, bytes)) return false;
    }
  }

  bool escape(std::string& text, bool bytes) {
    const char e = s_[p_ + 1];
    p_ += 2;
    static const char kSimple[] = "\\\\''\"\"a\ab\bf\fn\nr\rt\tv\v";
    for (size_t i = 0; kSimple[i]; i += 2)
      if (e == kSimple[i]) return text += kSimple[i + 1], true;
    if (e == '\n') return true;
    if (e == '\r') return p_ += peek() == '\n', true;
    if (e >= '0' && e <= '7') {
      uint32_t v = static_cast<uint32_t>(e - '0');
      for (int k = 0; k < 2 && peek() >= '0' && peek() <= '7'; ++k) v = v * 8 + static_cast<uint32_t>(s_[p_++] - '0');
      if (bytes) return text += static_cast<char>(v & 0xFF), true;
      return append_utf8(text, v), true;
    }
    const int digits = e == 'x' ? 2 : bytes ? 0 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits > 0) {
      uint32_t v = 0;
      for (int k = 0; k < digits; ++k) {
        const char h = peek();
        if (!std::isxdigit(static_cast<unsigned char>(h))) return fail("a \\" + std::string(1, e) + " escape without its hex digits");
        v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : std::tolower(h) - 'a' + 10);
        ++p_;
      }
      if (bytes) return text += static_cast<char>(v), true;
      if (v > 0x10FFFF) return fail("an escape beyond U+10FFFF");
      return append_utf8(text, v), true;
    }
    if (e == 'N' && !bytes) return fail("kiln does not read \\N{...} escapes");
    text += '\\';  // an unknown escape stays as written
    text += e;
    return true;
  }

  // Digits of one base with single underscores between them; false when none or misplaced.
  bool digits(int base, std::string& out) {
    auto ok = [&](char c) {
      return base == 16 ? std::isxdigit(static_cast<unsigned char>(c)) != 0 : c >= '0' && c < static_cast<char>('0' + base);
    };
    if (!ok(peek())) return false;
    for (;;) {
      if (ok(peek())) {
        out += s_[p_++];
      } else if (peek() == '_' && ok(peek(1))) {
        ++p_;
      } else {
        return true;
      }
    }
  }

  // A number with an optional sign, or literal_eval's complex form: real + imaginary.
  bool signed_number(Literal& out) {
    bool negative = false;
    if (peek() == '+' || peek() == '-') {
      negative = s_[p_++] == '-';
      if (!skip()) return false;
      if (!(std::isdigit(static_cast<unsigned char>(peek())) || (peek() == '.' && std::isdigit(static_cast<unsigned char>(peek(1))))))
        return fail("a sign before something that is not a number");
    }
    if (!number(out)) return false;
    if (negative && out.kind == Literal::kInt) out.value = -out.value;
    if (out.kind == Literal::kComplex) return true;
    const size_t save = p_;
    if (!skip()) return false;
    if (peek() == '+' || peek() == '-') {
      ++p_;
      Literal imag;
      if (!skip() || !number(imag)) return false;
      if (imag.kind != Literal::kComplex) return fail("'" + std::string(s_.substr(save, p_ - save)) + "' is arithmetic, not a literal");
      out.kind = Literal::kComplex;
      return true;
    }
    p_ = save;
    return true;
  }

  bool number(Literal& out) {
    std::string d;
    out.kind = Literal::kInt;
    int base = 10;
    if (peek() == '0' && std::strchr("xXoObB", peek(1)) && peek(1) != '\0') {
      base = std::tolower(peek(1)) == 'x' ? 16 : std::tolower(peek(1)) == 'o' ? 8 : 2;
      p_ += 2;
      if (peek() == '_') ++p_;
      if (!digits(base, d)) return fail("a number without its digits at '" + excerpt(p_) + "'");
    } else {
      const bool has_int = digits(10, d);
      bool is_float = false;
      if (peek() == '.') {
        ++p_;
        std::string frac;
        if (!digits(10, frac) && !has_int) return fail("a malformed number");
        is_float = true;
      }
      if (peek() == 'e' || peek() == 'E') {
        ++p_;
        if (peek() == '+' || peek() == '-') ++p_;
        std::string exp;
        if (!digits(10, exp)) return fail("a number with an empty exponent");
        is_float = true;
      }
      if (peek() == 'j' || peek() == 'J') {
        ++p_;
        out.kind = Literal::kComplex;
      } else if (is_float) {
        out.kind = Literal::kFloat;
      } else if (d.size() > 1 && d[0] == '0' && d.find_first_not_of('0') != std::string::npos) {
        return fail("leading zeros in '" + d + "' (Python reads no octal without 0o)");
      }
    }
    if (out.kind == Literal::kInt) {
      for (const char c : d) {
        const int v = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10;
        if (out.value > (INT64_MAX - v) / base) out.too_big = true;
        if (!out.too_big) out.value = out.value * base + v;
      }
    }
    // Python 2's long suffix, which NumPy's fallback for 1.0 and 2.0 headers drops.
    if (long_suffix_) {
      size_t q = p_;
      while (q < s_.size() && (s_[q] == ' ' || s_[q] == '\t' || s_[q] == '\f')) ++q;
      if (q < s_.size() && s_[q] == 'L' && (q + 1 >= s_.size() || !is_name_char(s_[q + 1]))) p_ = q + 1;
    }
    if (is_name_char(peek())) return fail("a malformed number at '" + excerpt(p_) + "'");
    return true;
  }

  std::string_view s_;
  bool long_suffix_;
  size_t p_ = 0;
  int depth_ = 0;        // open brackets here (newlines and comments allowed inside)
  int depth_guard_ = 0;  // nested values being parsed
  std::string error_;
};

const char* kind_name(Literal::Kind k) {
  static const char* const kNames[] = {"a str", "bytes", "an int", "a bool", "None", "a float", "a complex",
                                       "Ellipsis", "a tuple", "a list", "a dict", "a set"};
  return kNames[k];
}

}  // namespace

Expected<NpyHeader> parse_npy_header(std::string_view bytes, int major) {
  if (bytes.find('\0') != std::string_view::npos) return invalid_argument(".npy header holds a NUL byte");
  // 1.0 and 2.0 headers are Latin-1, 3.0 UTF-8; the parser reads UTF-8.
  std::string text;
  size_t chars = bytes.size();
  if (major >= 3) {
    chars = utf8_length(bytes);
    if (chars == SIZE_MAX) return invalid_argument(".npy 3.0 header is not valid UTF-8");
    text = std::string(bytes);
  } else {
    for (const char c : bytes) append_utf8(text, static_cast<unsigned char>(c));
  }
  if (chars > kMaxHeaderChars)
    return invalid_argument(".npy header of " + std::to_string(chars) + " characters is longer than NumPy reads (" +
                            std::to_string(kMaxHeaderChars) + ")");
  Parser parser(text, /*long_suffix=*/major <= 2);
  Literal dict;
  if (!parser.parse(dict)) return invalid_argument(".npy header is not a Python literal: " + parser.error());
  if (dict.kind != Literal::kDict) return invalid_argument(std::string(".npy header is ") + kind_name(dict.kind) + ", not a dict");
  // A key given twice takes its last value, as in a Python dict.
  const Literal* descr = nullptr;
  const Literal* fortran = nullptr;
  const Literal* shape = nullptr;
  for (size_t i = 0; i + 1 < dict.items.size(); i += 2) {
    const Literal& k = dict.items[i];
    const Literal* v = &dict.items[i + 1];
    if (k.kind == Literal::kStr && k.text == "descr") descr = v;
    else if (k.kind == Literal::kStr && k.text == "fortran_order") fortran = v;
    else if (k.kind == Literal::kStr && k.text == "shape") shape = v;
    else return invalid_argument(".npy header has the key " + parser.source(k) + "; its keys are 'descr', 'fortran_order' and 'shape' only");
  }
  for (const auto& [v, key] : {std::pair{descr, "descr"}, {fortran, "fortran_order"}, {shape, "shape"}})
    if (!v) return invalid_argument(std::string(".npy header has no '") + key + "'");
  NpyHeader h;
  if (shape->kind != Literal::kTuple)
    return invalid_argument(".npy header: shape " + parser.source(*shape) + " is " + kind_name(shape->kind) + ", not a tuple of ints");
  for (const Literal& d : shape->items) {
    if (d.kind != Literal::kInt)
      return invalid_argument(".npy header: shape " + parser.source(*shape) + " holds " + kind_name(d.kind) + " (" +
                              parser.source(d) + "), not an int");
    if (d.too_big || d.value < 0)
      return invalid_argument(".npy header: shape " + parser.source(*shape) + " holds the dimension " + parser.source(d));
    h.shape.push_back(d.value);
  }
  if (fortran->kind != Literal::kBool)
    return invalid_argument(".npy header: fortran_order " + parser.source(*fortran) + " is not True or False");
  h.fortran_order = fortran->value != 0;
  if (descr->kind == Literal::kList) return unsupported(".npy header: structured dtypes (a list descr) are not supported");
  if (descr->kind != Literal::kStr)
    return invalid_argument(".npy header: descr " + parser.source(*descr) + " is " + kind_name(descr->kind) + ", not a dtype string");
  h.descr = descr->text;
  return h;
}

}  // namespace kiln
