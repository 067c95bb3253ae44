// Zip archives: the container of Keras's `.keras` files.
//
// The one adapter of Debian's libzip. An archive is read whole (every
// member's bytes, CRC-32 checked by libzip as it reads) or built in memory
// with its members stored, not compressed, as Keras writes them, and then
// written atomically by the caller.
#pragma once

#include <ctime>
#include <string>
#include <vector>

namespace lockstep::io {

struct ZipMember {
  std::string name{};
  std::string data{};
};

// The bytes of an archive holding `members` in this order, stored; each
// member's modification time is `mtime`.
std::string zip_archive_image(const std::vector<ZipMember>& members, std::time_t mtime);

// Every member of the archive at `path`, in archive order. An IOError names
// the file (and the member) when it is not a zip archive, is truncated, or a
// member's bytes do not match its CRC.
std::vector<ZipMember> read_zip(const std::string& path);

// Whether these bytes start like a zip archive ("PK\x03\x04", or an empty
// archive's "PK\x05\x06").
bool looks_like_zip(const std::string& first_bytes);

}  // namespace lockstep::io
