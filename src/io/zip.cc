// Zip archives read and built through libzip.
#include "lockstep/io/zip.h"

#include <zip.h>

#include <cstring>

#include "lockstep/core/checked.h"
#include "lockstep/core/error.h"
#include "lockstep/core/file.h"

namespace lockstep::io {
namespace {

std::string error_text(zip_error_t* e) { return zip_error_strerror(e); }

// Reads one member whole; libzip checks its CRC-32 at the end.
std::string read_member(zip_t* archive, zip_uint64_t index, const std::string& path,
                        const std::string& name, zip_uint64_t size) {
  zip_file_t* f = zip_fopen_index(archive, index, 0);
  LOCKSTEP_CHECK_AS(IOError, f != nullptr, path, ": member '", name, "': cannot open (",
                    zip_strerror(archive), ")");
  std::string data(size, '\0');
  zip_uint64_t got = 0;
  while (got < size) {
    const zip_int64_t n = zip_fread(f, data.data() + got, size - got);
    if (n <= 0) {
      const std::string why = n < 0 ? zip_file_strerror(f) : "it ends early";
      zip_fclose(f);
      detail::throw_error<IOError>(path, ": member '", name, "': read ", got, " of its ", size,
                                   " bytes (", why, ")");
    }
    got += static_cast<zip_uint64_t>(n);
  }
  char extra;
  const zip_int64_t more = zip_fread(f, &extra, 1);  // reaches the end, where the CRC is checked
  const std::string why = more < 0 ? zip_file_strerror(f) : "";
  zip_fclose(f);
  LOCKSTEP_CHECK_AS(IOError, more == 0, path, ": member '", name,
                    "': ", more > 0 ? "longer than its directory entry says" : why);
  return data;
}

}  // namespace

bool looks_like_zip(const std::string& first_bytes) {
  return first_bytes.size() >= 4 && (std::memcmp(first_bytes.data(), "PK\x03\x04", 4) == 0 ||
                                     std::memcmp(first_bytes.data(), "PK\x05\x06", 4) == 0);
}

std::vector<ZipMember> read_zip(const std::string& path) {
  const std::uint64_t file_size = regular_file_size(path);
  int code = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (archive == nullptr) {
    zip_error_t e;
    zip_error_init_with_code(&e, code);
    const std::string why = error_text(&e);
    zip_error_fini(&e);
    detail::throw_error<IOError>(path, ": not a readable zip archive (", why, ")");
  }
  std::vector<ZipMember> members;
  FileBudget budget(path, file_size);
  try {
    const zip_int64_t count = zip_get_num_entries(archive, 0);
    for (zip_int64_t i = 0; i < count; ++i) {
      zip_stat_t st;
      zip_stat_init(&st);
      LOCKSTEP_CHECK_AS(IOError, zip_stat_index(archive, static_cast<zip_uint64_t>(i), 0, &st) == 0,
                        path, ": member ", i, ": no directory entry (", zip_strerror(archive), ")");
      const std::string name = st.name != nullptr ? st.name : "";
      // A stored member is no larger than the file; a deflated one may be
      // up to 1032 times larger (deflate's limit) and no more.
      LOCKSTEP_CHECK_AS(IOError, st.size <= file_size * 1032 + 1024, path, ": member '", name,
                        "' claims ", st.size, " bytes, more than a ", file_size,
                        "-byte archive can hold");
      budget.take(st.size, "member '" + name + "'");
      members.push_back(
          {name, read_member(archive, static_cast<zip_uint64_t>(i), path, name, st.size)});
    }
  } catch (...) {
    zip_discard(archive);
    throw;
  }
  zip_discard(archive);
  return members;
}

std::string zip_archive_image(const std::vector<ZipMember>& members, std::time_t mtime) {
  zip_error_t e;
  zip_error_init(&e);
  zip_source_t* buffer = zip_source_buffer_create(nullptr, 0, 0, &e);
  LOCKSTEP_CHECK_AS(IOError, buffer != nullptr, "zip: no buffer (", error_text(&e), ")");
  zip_t* archive = zip_open_from_source(buffer, ZIP_TRUNCATE, &e);
  if (archive == nullptr) {
    zip_source_free(buffer);
    detail::throw_error<IOError>("zip: cannot start an archive (", error_text(&e), ")");
  }
  zip_source_keep(buffer);  // survives zip_close, which writes the archive into it
  auto give_up = [&](const std::string& what) {
    const std::string why = zip_strerror(archive);
    zip_discard(archive);
    zip_source_free(buffer);
    detail::throw_error<IOError>("zip: ", what, " (", why, ")");
  };
  for (const ZipMember& m : members) {
    zip_source_t* s = zip_source_buffer(archive, m.data.data(), m.data.size(), 0);
    if (s == nullptr) give_up("member '" + m.name + "' not added");
    const zip_int64_t index = zip_file_add(archive, m.name.c_str(), s, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(s);
      give_up("member '" + m.name + "' not added");
    }
    if (zip_set_file_compression(archive, static_cast<zip_uint64_t>(index), ZIP_CM_STORE, 0) != 0 ||
        zip_file_set_mtime(archive, static_cast<zip_uint64_t>(index), mtime, 0) != 0)
      give_up("member '" + m.name + "' not set up");
  }
  if (zip_close(archive) != 0) give_up("archive not written");
  std::string image;
  if (zip_source_open(buffer) == 0) {
    zip_source_seek(buffer, 0, SEEK_END);
    const zip_int64_t size = zip_source_tell(buffer);
    zip_source_seek(buffer, 0, SEEK_SET);
    image.resize(static_cast<std::size_t>(size < 0 ? 0 : size));
    const zip_int64_t got = zip_source_read(buffer, image.data(), image.size());
    zip_source_close(buffer);
    if (got != size) image.clear();
  }
  zip_source_free(buffer);
  LOCKSTEP_CHECK_AS(IOError, !image.empty(), "zip: the archive built in memory could not be read");
  return image;
}

}  // namespace lockstep::io
