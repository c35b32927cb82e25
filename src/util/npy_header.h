// util/npy_header.h — the header of a NumPy .npy file, read by NumPy's own rules.
//
// NumPy's header is the text of a Python dict literal, read with ast.literal_eval
// (numpy/lib/format.py `_read_array_header`); what it accepts is therefore Python's grammar, not a
// fixed layout. kiln reads that grammar for the literals literal_eval takes (strings with their
// prefixes, escapes and implicit concatenation, ints in any base with underscores, floats, complex,
// True/False/None, ..., tuples, lists, dicts, sets, set(), comments), so that:
//   - a key given twice takes its last value, as a Python dict does;
//   - the keys are exactly 'descr', 'fortran_order' and 'shape' (missing or extra: refused);
//   - shape is a tuple of ints (0x2 is 2, 1_0 is 10; 2.0, True or a list are refused), fortran_order
//     a bool, descr a str;
//   - versions 1.0 and 2.0 take Python 2's long suffix (2L), as NumPy's fallback filter does; 3.0
//     headers are UTF-8, the others Latin-1; at most 10,000 characters (np.load's default limit).
// Where kiln is stricter than NumPy it says so and refuses: a line continuation (backslash-newline)
// outside a string, a \N{...} escape, more than 200 nested brackets. It never accepts a header
// NumPy refuses, and never reads one NumPy accepts differently (tests/python/test_npy_header.py
// checks this against NumPy itself).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/status.h"

namespace kiln {

struct NpyHeader {
  std::string descr;  // the dtype descriptor as written ('<f4', '>i8', '|b1', 'float32', ...)
  bool fortran_order = false;
  std::vector<int64_t> shape;  // every dim >= 0
};

// Parses the header text (the bytes after the length field) of a version `major`.0 file. Errors
// (kInvalidArgument) say what is wrong without naming the file; the caller adds it.
Expected<NpyHeader> parse_npy_header(std::string_view bytes, int major);

}  // namespace kiln
