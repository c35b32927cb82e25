// util/utf8.h — names from a model are bytes; text that leaves kiln (messages, JSON, what the
// `kiln` command prints) must be UTF-8. Bytes that are not part of valid UTF-8 are shown as \xNN,
// as Python's 'backslashreplace' shows them, so a name prints the same from the CLI and Python.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

// The length in bytes of the valid UTF-8 sequence at s[i] (1-4), or 0 when none starts there
// (overlong forms, surrogates and code points past U+10FFFF are not valid).
size_t utf8_sequence_length(std::string_view s, size_t i);

// The number of code points of `s`, or SIZE_MAX when it is not valid UTF-8.
size_t utf8_length(std::string_view s);

// `s` with every byte outside valid UTF-8 written as \xNN (lowercase hex); valid UTF-8 unchanged.
std::string escape_invalid_utf8(std::string_view s);

// Appends code point `cp` (at most U+10FFFF) as UTF-8.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace kiln
