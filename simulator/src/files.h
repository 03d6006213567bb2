// Input and output files of the simulator, opened without ever blocking on them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "common.h"

namespace sim {

// Opens an input file for reading without ever blocking on it: O_NONBLOCK, then fstat;
// a fifo, device, socket or directory is a SimError naming the file.  Returns the stream
// (blocking again) and its size.
FILE* open_regular(const std::string& path, uint64_t* size = nullptr);
// For a file another library opens by name (an ifstream, dlopen): stat alone, never
// blocking; a path that exists and is not a regular file is a SimError "PATH: what: is a
// fifo, not a regular file".  A missing file is left to the opener's own message.
void refuse_irregular(const std::string& path, const std::string& what);
// Opens an output file for writing ("wb") without blocking: a fifo with no reader is
// refused (ENXIO) instead of waited on; a fifo with a reader or /dev/stdout is fine.
FILE* open_output(const std::string& path);

}  // namespace sim
