// util/atomic_file.h — files kiln writes for later runs (engines, timing and calibration caches),
// replaced whole so that nobody sees them change.
#pragma once

#include <string>
#include <string_view>

#include "kiln/status.h"

namespace kiln {

// Writes `bytes` as the file `path`: into a new temporary file beside it (created exclusively under
// a unique name, never through a symlink) which is then renamed over `path`. A reader sees the old
// file or the new one, never half of either; a process that mapped the old file keeps its contents
// (the old inode stays unchanged while mapped); a symlink planted at `path` is replaced, not written
// through. A directory, device, FIFO or socket at `path` is refused: nothing is written. `what`
// names the file in errors ("engine", "timing cache"). On failure the temporary file is removed.
Status write_file_atomically(const std::string& path, std::string_view bytes, const std::string& what);

// An output the user named (an engine: `kiln build -o`, Engine::save): as write_file_atomically,
// except that the null device at `path` itself, not through a link (/dev/null, to time a build
// without keeping its engine), is written into directly: there is no file to replace (renaming over
// it would replace the device node), and nothing can be read back. Other devices and FIFOs stay
// refused (a FIFO would wait for a reader; /dev/mem must never be written); caches keep the strict
// rule.
Status write_output_file(const std::string& path, std::string_view bytes, const std::string& what);

}  // namespace kiln
