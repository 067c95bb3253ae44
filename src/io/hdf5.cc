// HDF5 files read whole into an H5Group, and written from one, through
// libhdf5's C API and its in-memory ("core") file driver.
#include "lockstep/io/hdf5.h"

#include <hdf5.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "lockstep/core/checked.h"
#include "lockstep/core/error.h"
#include "lockstep/core/file.h"

namespace lockstep::io {

// ---- H5Group ---------------------------------------------------------------

namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(path);
  while (std::getline(in, part, '/')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

}  // namespace

H5Group& H5Group::group(const std::string& path) {
  H5Group* g = this;
  for (const std::string& part : split_path(path)) g = &g->groups[part];
  return *g;
}

const H5Group* H5Group::find_group(const std::string& path) const {
  const H5Group* g = this;
  for (const std::string& part : split_path(path)) {
    auto it = g->groups.find(part);
    if (it == g->groups.end()) return nullptr;
    g = &it->second;
  }
  return g;
}

const Tensor* H5Group::find_dataset(const std::string& path) const {
  const auto slash = path.rfind('/');
  const H5Group* g = slash == std::string::npos ? this : find_group(path.substr(0, slash));
  if (g == nullptr) return nullptr;
  auto it = g->datasets.find(slash == std::string::npos ? path : path.substr(slash + 1));
  return it == g->datasets.end() ? nullptr : &it->second;
}

const std::string* H5Group::string_attribute(const std::string& name) const {
  auto it = attributes.find(name);
  if (it == attributes.end()) return nullptr;
  if (const auto* s = std::get_if<std::string>(&it->second)) return s;
  if (const auto* l = std::get_if<std::vector<std::string>>(&it->second)) {
    if (l->size() == 1) return &l->front();
  }
  return nullptr;
}

bool looks_like_h5(const std::string& first_bytes) {
  static const char kSignature[] = "\x89HDF\r\n\x1a\n";
  return first_bytes.size() >= 8 && std::memcmp(first_bytes.data(), kSignature, 8) == 0;
}

// ---- libhdf5 plumbing -------------------------------------------------------

namespace {

// Debian's libhdf5 is built without its thread-safety option: every call
// into it goes through this lock.
std::mutex& hdf5_mutex() {
  static std::mutex m;
  return m;
}

// Closes an HDF5 identifier with the right function when it leaves scope.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

herr_t collect_error(unsigned depth, const H5E_error2_t* e, void* out) {
  auto* messages = static_cast<std::vector<std::string>*>(out);
  if (e->desc != nullptr && *e->desc != '\0') messages->push_back(e->desc);
  (void)depth;
  return 0;
}

// What libhdf5 said about its last failure: the outermost and the innermost
// messages of its error stack ("unable to open file: file signature not
// found").
std::string hdf5_message() {
  std::vector<std::string> messages;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &messages);
  H5Eclear2(H5E_DEFAULT);
  if (messages.empty()) return "libhdf5 gave no reason";
  if (messages.size() == 1) return messages.front();
  return messages.front() + ": " + messages.back();
}

void quiet_hdf5() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

[[noreturn]] void fail(const std::string& source, const std::string& object,
                       const std::string& what) {
  detail::throw_error<IOError>(source, object.empty() ? "" : ": ", object, ": ", what, " (",
                               hdf5_message(), ")");
}

std::string join(const std::string& parent, const std::string& name) {
  return parent.empty() ? name : parent + "/" + name;
}

// A unique name per in-memory file: libhdf5 keeps open files by name.
std::string image_name() {
  static std::atomic<std::uint64_t> counter{0};
  return "lockstep-image-" + std::to_string(counter++) + ".h5";
}

// ---- writing ---------------------------------------------------------------

struct WriteTypes {
  hid_t file_type;
  hid_t memory_type;
};

WriteTypes types_for(DType d, hid_t bool_type, const std::string& object) {
  switch (d) {
    case DType::kFloat32:
      return {H5T_IEEE_F32LE, H5T_NATIVE_FLOAT};
    case DType::kInt32:
      return {H5T_STD_I32LE, H5T_NATIVE_INT32};
    case DType::kInt64:
      return {H5T_STD_I64LE, H5T_NATIVE_INT64};
    case DType::kUInt8:
      return {H5T_STD_U8LE, H5T_NATIVE_UINT8};
    case DType::kBool:
      return {bool_type, bool_type};
    case DType::kBFloat16:
    case DType::kFloat16:
      break;
  }
  detail::throw_error<ValueError>("write_h5: dataset '", object, "' is ", d,
                                  ", which Keras's HDF5 files do not hold; cast it to float32");
}

// h5py's bool: an enum over int8 with FALSE = 0 and TRUE = 1.
hid_t make_bool_type() {
  hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
  std::int8_t v = 0;
  H5Tenum_insert(t, "FALSE", &v);
  v = 1;
  H5Tenum_insert(t, "TRUE", &v);
  return t;
}

void write_attributes(hid_t obj, const H5Group& g, const std::string& where) {
  Handle str(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(str.get(), H5T_VARIABLE);
  H5Tset_cset(str.get(), H5T_CSET_UTF8);
  for (const auto& [name, value] : g.attributes) {
    const std::string object = join(where, "@" + name);
    if (const auto* s = std::get_if<std::string>(&value)) {
      Handle space(H5Screate(H5S_SCALAR), H5Sclose);
      Handle a(H5Acreate2(obj, name.c_str(), str.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
               H5Aclose);
      const char* p = s->c_str();
      if (!a.ok() || H5Awrite(a.get(), str.get(), &p) < 0) fail("write_h5", object, "not written");
    } else if (const auto* l = std::get_if<std::vector<std::string>>(&value)) {
      const hsize_t n = l->size();
      Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
      Handle a(H5Acreate2(obj, name.c_str(), str.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
               H5Aclose);
      std::vector<const char*> ptrs;
      for (const std::string& e : *l) ptrs.push_back(e.c_str());
      if (!a.ok() || H5Awrite(a.get(), str.get(), ptrs.data()) < 0)
        fail("write_h5", object, "not written");
    } else {
      const auto& numbers = std::get<std::vector<double>>(value);
      const hsize_t n = numbers.size();
      Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
      Handle a(H5Acreate2(obj, name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
               H5Aclose);
      if (!a.ok() || H5Awrite(a.get(), H5T_NATIVE_DOUBLE, numbers.data()) < 0)
        fail("write_h5", object, "not written");
    }
  }
}

void write_group(hid_t loc, const H5Group& g, const std::string& where, hid_t bool_type) {
  write_attributes(loc, g, where);
  for (const auto& [name, stored] : g.datasets) {
    const std::string object = join(where, name);
    const Tensor t = stored.cpu();  // the bytes in host memory (a tensor on a GPU copied first)
    const WriteTypes types = types_for(t.dtype(), bool_type, object);
    std::vector<hsize_t> dims(t.shape().dims().begin(), t.shape().dims().end());
    Handle space(dims.empty()
                     ? H5Screate(H5S_SCALAR)
                     : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                 H5Sclose);
    Handle d(H5Dcreate2(loc, name.c_str(), types.file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                        H5P_DEFAULT),
             H5Dclose);
    if (!d.ok()) fail("write_h5", object, "dataset not created");
    if (t.numel() > 0 &&
        H5Dwrite(d.get(), types.memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()) < 0)
      fail("write_h5", object, "dataset not written");
  }
  for (const auto& [name, child] : g.groups) {
    const std::string object = join(where, name);
    Handle sub(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    if (!sub.ok()) fail("write_h5", object, "group not created");
    write_group(sub.get(), child, object, bool_type);
  }
}

// ---- reading, in the reader's process ------------------------------------
//
// libhdf5 runs on a file's bytes in a child process (core/isolated.h says
// why), which streams what it reads back as records, in the order it meets
// them:
//   'A' name kind value                 an attribute of the current group
//   'D' name dtype rank dims... bytes    a dataset of the current group
//   'G' name ... 'E'                     a child group, its records, its end
// Integers little-endian u64 (dtype and kind u8); strings and byte runs
// length-prefixed. decode() below rebuilds the H5Group, checking every
// length against the stream.

// Keras's files nest groups a few levels deep (a model in a model in a
// model: ~12); more is a damaged file, or a hard-link chain built to recurse.
constexpr int kMaxGroupDepth = 64;

class Encoder {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void str(const std::string& s) {
    u64(s.size());
    out_ += s;
  }
  // Room for `n` bytes at the end; where they start.
  char* reserve(std::size_t n) {
    u64(n);
    const std::size_t at = out_.size();
    out_.resize(at + n);
    return out_.data() + at;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

struct ReadContext {
  std::string source;
  FileBudget budget;
  std::set<haddr_t> seen;  // every object read: a second link to one is refused
};

std::uint8_t dtype_code(DType d) { return static_cast<std::uint8_t>(d); }

// Reads a string or numeric attribute; other kinds are left out.
void read_attribute(hid_t obj, const char* name, Encoder& enc, ReadContext& ctx,
                    const std::string& where) {
  const std::string object = join(where, std::string("@") + name);
  Handle a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.ok()) fail(ctx.source, object, "unreadable attribute");
  Handle type(H5Aget_type(a.get()), H5Tclose);
  Handle space(H5Aget_space(a.get()), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) fail(ctx.source, object, "bad attribute shape");
  const bool scalar = H5Sget_simple_extent_type(space.get()) == H5S_SCALAR;
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls == H5T_STRING) {
    std::vector<std::string> values;
    if (H5Tis_variable_str(type.get()) > 0) {
      ctx.budget.take(static_cast<std::uint64_t>(n) * sizeof(char*), object);
      Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(mem.get(), H5T_VARIABLE);
      H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
      std::vector<char*> ptrs(static_cast<std::size_t>(n), nullptr);
      if (n > 0 && H5Aread(a.get(), mem.get(), ptrs.data()) < 0)
        fail(ctx.source, object, "unreadable string attribute");
      for (char* p : ptrs) values.emplace_back(p == nullptr ? "" : p);
      if (n > 0) H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
    } else {
      const std::size_t size = H5Tget_size(type.get());
      const auto bytes = checked_mul<std::uint64_t>(size, static_cast<std::uint64_t>(n));
      if (!bytes) fail(ctx.source, object, "a string attribute larger than 2^64 bytes");
      ctx.budget.take(*bytes, object);
      std::vector<char> buf(static_cast<std::size_t>(*bytes) + 1, '\0');
      Handle mem(H5Tcopy(type.get()), H5Tclose);
      if (n > 0 && H5Aread(a.get(), mem.get(), buf.data()) < 0)
        fail(ctx.source, object, "unreadable string attribute");
      for (hssize_t i = 0; i < n; ++i) {
        std::string s(buf.data() + static_cast<std::size_t>(i) * size, size);
        s.erase(s.find_last_not_of(std::string("\0 ", 2)) + 1);  // null or space padding
        values.push_back(s);
      }
    }
    enc.u8('A');
    enc.str(name);
    if (scalar && values.size() == 1) {
      enc.u8(0);
      enc.str(values.front());
    } else {
      enc.u8(1);
      enc.u64(values.size());
      for (const std::string& v : values) enc.str(v);
    }
  } else if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
    ctx.budget.take(static_cast<std::uint64_t>(n) * sizeof(double), object);
    std::vector<double> values(static_cast<std::size_t>(n));
    if (n > 0 && H5Aread(a.get(), H5T_NATIVE_DOUBLE, values.data()) < 0)
      fail(ctx.source, object, "unreadable numeric attribute");
    enc.u8('A');
    enc.str(name);
    enc.u8(2);
    enc.u64(values.size());
    for (double v : values) enc.u64(std::bit_cast<std::uint64_t>(v));
  }
}

struct AttributeVisit {
  Encoder* enc;
  ReadContext* ctx;
  const std::string* where;
  std::exception_ptr error;
};

herr_t on_attribute(hid_t obj, const char* name, const H5A_info_t*, void* data) {
  auto* visit = static_cast<AttributeVisit*>(data);
  try {
    read_attribute(obj, name, *visit->enc, *visit->ctx, *visit->where);
  } catch (...) {
    visit->error = std::current_exception();
    return -1;
  }
  return 0;
}

void read_attributes(hid_t obj, Encoder& enc, ReadContext& ctx, const std::string& where) {
  AttributeVisit visit{&enc, &ctx, &where, nullptr};
  const herr_t status = H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, nullptr, on_attribute, &visit);
  if (visit.error) std::rethrow_exception(visit.error);
  if (status < 0) fail(ctx.source, where, "attributes not listed");
}

void read_dataset(hid_t d, const std::string& name, Encoder& enc, ReadContext& ctx,
                  const std::string& object) {
  Handle type(H5Dget_type(d), H5Tclose);
  Handle space(H5Dget_space(d), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail(ctx.source, object, "bad dataset shape");
  LOCKSTEP_CHECK_AS(IOError, rank <= Shape::kMaxRank, ctx.source, ": ", object,
                    ": a dataset of rank ", rank, "; at most ", Shape::kMaxRank, " is read");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);

  const H5T_class_t cls = H5Tget_class(type.get());
  const std::size_t size = H5Tget_size(type.get());
  DType dtype;
  hid_t memory_type;
  hid_t native_id = -1;
  if (cls == H5T_FLOAT && (size == 2 || size == 4 || size == 8)) {
    dtype = DType::kFloat32;
    memory_type = H5T_NATIVE_FLOAT;
  } else if (cls == H5T_INTEGER && H5Tget_sign(type.get()) == H5T_SGN_2 && size <= 8) {
    dtype = size == 8 ? DType::kInt64 : DType::kInt32;
    memory_type = size == 8 ? H5T_NATIVE_INT64 : H5T_NATIVE_INT32;
  } else if (cls == H5T_INTEGER && size == 1) {
    dtype = DType::kUInt8;
    memory_type = H5T_NATIVE_UINT8;
  } else if (cls == H5T_ENUM && size == 1) {  // h5py's bool
    dtype = DType::kBool;
    native_id = H5Tget_native_type(type.get(), H5T_DIR_ASCEND);
    memory_type = native_id;
  } else {
    detail::throw_error<IOError>(ctx.source, ": ", object, ": a dataset of HDF5 type class ",
                                 static_cast<int>(cls), " and ", size,
                                 " bytes; expected float, signed integer, uint8 or bool");
  }
  Handle native(native_id, H5Tclose);
  std::optional<std::uint64_t> bytes = dtype_size(dtype);
  for (hsize_t n : dims) {
    if (bytes) bytes = checked_mul<std::uint64_t>(*bytes, n);
  }
  std::vector<std::int64_t> shape;
  for (hsize_t n : dims)
    shape.push_back(static_cast<std::int64_t>(std::min<hsize_t>(n, INT64_MAX)));
  LOCKSTEP_CHECK_AS(IOError, bytes.has_value(), ctx.source, ": ", object, ": a dataset of shape ",
                    Shape(shape), " holds more than 2^64 bytes");
  // Keras and h5py write every dataset's values: one whose storage was
  // never allocated would read as its fill value, gigabytes of it from a
  // file of kilobytes.
  LOCKSTEP_CHECK_AS(IOError, *bytes == 0 || H5Dget_storage_size(d) > 0, ctx.source, ": ", object,
                    ": a dataset of shape ", Shape(shape),
                    " stores none of its values (declared, never written)");
  ctx.budget.take(*bytes, object + " (a dataset of shape " + Shape(shape).to_string() + ")");
  enc.u8('D');
  enc.str(name);
  enc.u8(dtype_code(dtype));
  enc.u8(static_cast<std::uint8_t>(rank));
  for (std::int64_t n : shape) enc.u64(static_cast<std::uint64_t>(n));
  char* out = enc.reserve(static_cast<std::size_t>(*bytes));
  if (*bytes > 0 && H5Dread(d, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
    fail(ctx.source, object, "dataset not readable");
}

void read_group(hid_t loc, Encoder& enc, ReadContext& ctx, const std::string& where, int depth);

struct LinkVisit {
  Encoder* enc;
  ReadContext* ctx;
  const std::string* where;
  int depth;
  std::exception_ptr error;
};

herr_t on_link(hid_t loc, const char* name, const H5L_info_t* info, void* data) {
  auto* visit = static_cast<LinkVisit*>(data);
  try {
    const std::string object = join(*visit->where, name);
    ReadContext& ctx = *visit->ctx;
    LOCKSTEP_CHECK_AS(IOError, info->type == H5L_TYPE_HARD, ctx.source, ": ", object,
                      ": a soft or external link; Keras's files hold none");
    Handle obj(H5Oopen(loc, name, H5P_DEFAULT), H5Oclose);
    if (!obj.ok()) fail(ctx.source, object, "object not readable");
    // A second hard link to an object read already: a cycle (a group that
    // holds its own ancestor recursed without end) or a shared subtree
    // (each level doubling what is read). Keras's files link every object
    // once.
    H5O_info_t oinfo;
    if (H5Oget_info2(obj.get(), &oinfo, H5O_INFO_BASIC) < 0)
      fail(ctx.source, object, "object header not readable");
    LOCKSTEP_CHECK_AS(IOError, ctx.seen.insert(oinfo.addr).second, ctx.source, ": ", object,
                      ": links to an object that another link reached already (a link cycle "
                      "or a shared object); Keras's files link each object once");
    switch (H5Iget_type(obj.get())) {
      case H5I_GROUP:
        visit->enc->u8('G');
        visit->enc->str(name);
        read_group(obj.get(), *visit->enc, ctx, object, visit->depth + 1);
        visit->enc->u8('E');
        break;
      case H5I_DATASET:
        read_dataset(obj.get(), name, *visit->enc, ctx, object);
        break;
      default:
        detail::throw_error<IOError>(ctx.source, ": ", object, ": neither a group nor a dataset");
    }
  } catch (...) {
    visit->error = std::current_exception();
    return -1;
  }
  return 0;
}

void read_group(hid_t loc, Encoder& enc, ReadContext& ctx, const std::string& where, int depth) {
  LOCKSTEP_CHECK_AS(IOError, depth <= kMaxGroupDepth, ctx.source, ": ", where,
                    ": groups nested more than ", kMaxGroupDepth,
                    " levels deep; Keras's files nest a few");
  read_attributes(loc, enc, ctx, where.empty() ? "/" : where);
  LinkVisit visit{&enc, &ctx, &where, depth, nullptr};
  const herr_t status = H5Literate(loc, H5_INDEX_NAME, H5_ITER_INC, nullptr, on_link, &visit);
  if (visit.error) std::rethrow_exception(visit.error);
  if (status < 0) fail(ctx.source, where.empty() ? "/" : where, "group not listed");
}

// The whole file as the reader's records (in whichever process runs it).
std::string encode_file(const std::string& bytes, const std::string& source) {
  quiet_hdf5();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_core(fapl.get(), 1 << 16, /*backing_store=*/0);
  if (H5Pset_file_image(fapl.get(), const_cast<char*>(bytes.data()), bytes.size()) < 0)
    fail(source, "", "file image not taken");
  Handle file(H5Fopen(image_name().c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!file.ok()) fail(source, "", "not a readable HDF5 file");
  Encoder enc;
  ReadContext ctx{source, FileBudget(source, bytes.size()), {}};
  H5O_info_t root;
  if (H5Oget_info2(file.get(), &root, H5O_INFO_BASIC) < 0)
    fail(source, "/", "root group header not readable");
  ctx.seen.insert(root.addr);
  read_group(file.get(), enc, ctx, "", 0);
  return enc.take();
}

// ---- reading, in the caller's process ---------------------------------------

class Decoder {
 public:
  Decoder(const std::string& bytes, const std::string& source) : bytes_(bytes), source_(source) {}
  bool done() const { return at_ == bytes_.size(); }
  std::uint8_t u8() {
    need(1);
    return static_cast<std::uint8_t>(bytes_[at_++]);
  }
  std::uint64_t u64() {
    need(8);
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(bytes_[at_ + i])) << (8 * i);
    at_ += 8;
    return v;
  }
  std::string str() {
    const std::uint64_t n = u64();
    need(n);
    std::string s = bytes_.substr(at_, n);
    at_ += n;
    return s;
  }
  const char* bytes(std::uint64_t n) {
    need(n);
    const char* p = bytes_.data() + at_;
    at_ += n;
    return p;
  }
  [[noreturn]] void broken(const std::string& what) const {
    detail::throw_error<IOError>(source_, ": the HDF5 reader's result is malformed at byte ", at_,
                                 " (", what, ")");
  }

 private:
  void need(std::uint64_t n) const {
    if (n > bytes_.size() - at_) broken("truncated");
  }
  const std::string& bytes_;
  const std::string& source_;
  std::size_t at_ = 0;
};

H5Group decode(const std::string& records, const std::string& source) {
  H5Group root;
  std::vector<H5Group*> open{&root};
  Decoder in(records, source);
  while (!in.done()) {
    H5Group& g = *open.back();
    switch (in.u8()) {
      case 'A': {
        const std::string name = in.str();
        const std::uint8_t kind = in.u8();
        if (kind == 0) {
          g.attributes[name] = in.str();
        } else if (kind == 1) {
          std::vector<std::string> values;
          for (std::uint64_t n = in.u64(), i = 0; i < n; ++i) values.push_back(in.str());
          g.attributes[name] = std::move(values);
        } else if (kind == 2) {
          std::vector<double> values;
          for (std::uint64_t n = in.u64(), i = 0; i < n; ++i)
            values.push_back(std::bit_cast<double>(in.u64()));
          g.attributes[name] = std::move(values);
        } else {
          in.broken("attribute kind " + std::to_string(kind));
        }
        break;
      }
      case 'D': {
        const std::string name = in.str();
        const std::uint8_t code = in.u8();
        if (code > static_cast<std::uint8_t>(DType::kBool)) in.broken("dtype");
        const auto dtype = static_cast<DType>(code);
        const int rank = in.u8();
        if (rank > Shape::kMaxRank) in.broken("rank");
        Shape shape;
        for (int i = 0; i < rank; ++i) {
          const std::uint64_t n = in.u64();
          if (n > static_cast<std::uint64_t>(INT64_MAX)) in.broken("dimension");
          shape.push_back(static_cast<std::int64_t>(n));
        }
        const std::uint64_t n = in.u64();
        const char* data = in.bytes(n);
        if (n != checked_mul<std::uint64_t>(static_cast<std::uint64_t>(shape.numel()),
                                            dtype_size(dtype)))
          in.broken("dataset size");
        Tensor t = Tensor::empty(shape, dtype);
        if (n > 0) std::memcpy(t.raw_data(), data, n);
        g.datasets[name] = std::move(t);
        break;
      }
      case 'G':
        open.push_back(&g.groups[in.str()]);
        break;
      case 'E':
        if (open.size() == 1) in.broken("a group closed twice");
        open.pop_back();
        break;
      default:
        in.broken("record kind");
    }
  }
  if (open.size() != 1) in.broken("a group left open");
  return root;
}

}  // namespace

// ---- entry points -------------------------------------------------------------

std::string h5_file_image(const H5Group& root) {
  std::lock_guard lock(hdf5_mutex());
  quiet_hdf5();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_core(fapl.get(), 1 << 16, /*backing_store=*/0);
  Handle file(H5Fcreate(image_name().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  if (!file.ok()) fail("write_h5", "", "in-memory file not created");
  Handle bool_type(make_bool_type(), H5Tclose);
  write_group(file.get(), root, "", bool_type.get());
  if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) fail("write_h5", "", "not flushed");
  const ssize_t size = H5Fget_file_image(file.get(), nullptr, 0);
  if (size < 0) fail("write_h5", "", "no file image");
  std::string image(static_cast<std::size_t>(size), '\0');
  if (H5Fget_file_image(file.get(), image.data(), image.size()) < 0)
    fail("write_h5", "", "no file image");
  return image;
}

void write_h5(const std::string& path, const H5Group& root) {
  atomic_write(path, h5_file_image(root));
}

IsolationLimits h5_read_limits(std::uint64_t file_bytes) {
  const FileBudget budget("", file_bytes);
  IsolationLimits limits;
  // The datasets (the budget), the records that carry them back, and
  // libhdf5's own buffers (chunk caches, inflated chunks).
  limits.memory_bytes = 2 * budget.limit() + (std::uint64_t{256} << 20);
  // MobileNetV2's 14 MB of weights read in ~20 ms: a second per 64 MiB
  // leaves a fifty-fold margin for a loaded machine.
  limits.cpu_seconds = 10 + static_cast<unsigned>(file_bytes >> 26);
  limits.wall_seconds = 6 * limits.cpu_seconds;
  return limits;
}

H5Group read_h5_image(const std::string& bytes, const std::string& source,
                      const IsolationLimits& limits) {
  LOCKSTEP_CHECK_AS(
      IOError, looks_like_h5(bytes.substr(0, 8)), source,
      ": not an HDF5 file (byte 0: expected the signature \\x89HDF\\r\\n\\x1a\\n, "
      "found ",
      bytes.size() < 8 ? "only " + std::to_string(bytes.size()) + " bytes" : "other bytes", ")");
  std::string records;
  {
    // Held across the fork: no other thread is inside libhdf5 when the
    // child's copy of it starts.
    std::lock_guard lock(hdf5_mutex());
    records = run_isolated(source, limits, [&] { return encode_file(bytes, source); });
  }
  return decode(records, source);
}

H5Group read_h5_image(const std::string& bytes, const std::string& source) {
  return read_h5_image(bytes, source, h5_read_limits(bytes.size()));
}

H5Group read_h5_image_in_process(const std::string& bytes, const std::string& source) {
  std::string records;
  {
    std::lock_guard lock(hdf5_mutex());
    records = encode_file(bytes, source);
  }
  return decode(records, source);
}

H5Group read_h5(const std::string& path) { return read_h5_image(read_whole_file(path), path); }

}  // namespace lockstep::io
