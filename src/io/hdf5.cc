// HDF5 files read whole into an H5Group, and written from one, through
// libhdf5's C API and its in-memory ("core") file driver.
#include "lockstep/io/hdf5.h"

#include <hdf5.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

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
  for (const auto& [name, t] : g.datasets) {
    const std::string object = join(where, name);
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

// ---- reading ---------------------------------------------------------------

struct ReadContext {
  std::string source;
  std::uint64_t max_bytes;  // per dataset: guards against a decompression bomb
};

// Reads a string or numeric attribute; other kinds are left out.
void read_attribute(hid_t obj, const char* name, H5Group& g, const ReadContext& ctx,
                    const std::string& where) {
  Handle a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.ok()) fail(ctx.source, join(where, std::string("@") + name), "unreadable attribute");
  Handle type(H5Aget_type(a.get()), H5Tclose);
  Handle space(H5Aget_space(a.get()), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) fail(ctx.source, join(where, std::string("@") + name), "bad attribute shape");
  const bool scalar = H5Sget_simple_extent_type(space.get()) == H5S_SCALAR;
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls == H5T_STRING) {
    std::vector<std::string> values;
    if (H5Tis_variable_str(type.get()) > 0) {
      Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(mem.get(), H5T_VARIABLE);
      H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
      std::vector<char*> ptrs(static_cast<std::size_t>(n), nullptr);
      if (n > 0 && H5Aread(a.get(), mem.get(), ptrs.data()) < 0)
        fail(ctx.source, join(where, std::string("@") + name), "unreadable string attribute");
      for (char* p : ptrs) values.emplace_back(p == nullptr ? "" : p);
      if (n > 0) H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
    } else {
      const std::size_t size = H5Tget_size(type.get());
      std::vector<char> buf(size * static_cast<std::size_t>(n) + 1, '\0');
      Handle mem(H5Tcopy(type.get()), H5Tclose);
      if (n > 0 && H5Aread(a.get(), mem.get(), buf.data()) < 0)
        fail(ctx.source, join(where, std::string("@") + name), "unreadable string attribute");
      for (hssize_t i = 0; i < n; ++i) {
        std::string s(buf.data() + static_cast<std::size_t>(i) * size, size);
        s.erase(s.find_last_not_of(std::string("\0 ", 2)) + 1);  // null or space padding
        values.push_back(s);
      }
    }
    if (scalar && values.size() == 1) {
      g.attributes[name] = values.front();
    } else {
      g.attributes[name] = values;
    }
  } else if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
    std::vector<double> values(static_cast<std::size_t>(n));
    if (n > 0 && H5Aread(a.get(), H5T_NATIVE_DOUBLE, values.data()) < 0)
      fail(ctx.source, join(where, std::string("@") + name), "unreadable numeric attribute");
    g.attributes[name] = values;
  }
}

herr_t on_attribute(hid_t obj, const char* name, const H5A_info_t*, void* data);

struct AttributeVisit {
  H5Group* group;
  const ReadContext* ctx;
  const std::string* where;
  std::exception_ptr error;
};

herr_t on_attribute(hid_t obj, const char* name, const H5A_info_t*, void* data) {
  auto* visit = static_cast<AttributeVisit*>(data);
  try {
    read_attribute(obj, name, *visit->group, *visit->ctx, *visit->where);
  } catch (...) {
    visit->error = std::current_exception();
    return -1;
  }
  return 0;
}

void read_attributes(hid_t obj, H5Group& g, const ReadContext& ctx, const std::string& where) {
  AttributeVisit visit{&g, &ctx, &where, nullptr};
  const herr_t status = H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, nullptr, on_attribute, &visit);
  if (visit.error) std::rethrow_exception(visit.error);
  if (status < 0) fail(ctx.source, where, "attributes not listed");
}

Tensor read_dataset(hid_t d, const ReadContext& ctx, const std::string& object) {
  Handle type(H5Dget_type(d), H5Tclose);
  Handle space(H5Dget_space(d), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail(ctx.source, object, "bad dataset shape");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  std::vector<std::int64_t> shape(dims.begin(), dims.end());

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
  std::uint64_t elements = 1;
  for (hsize_t n : dims) {
    LOCKSTEP_CHECK_AS(IOError, n == 0 || elements <= ctx.max_bytes / n, ctx.source, ": ", object,
                      ": a dataset of shape ", Shape(shape), " is larger than this file can hold");
    elements *= n;
  }
  LOCKSTEP_CHECK_AS(IOError, elements * dtype_size(dtype) <= ctx.max_bytes, ctx.source, ": ",
                    object, ": a dataset of shape ", Shape(shape),
                    " is larger than this file can hold");
  Tensor t = Tensor::empty(Shape(shape), dtype);
  if (elements > 0 && H5Dread(d, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()) < 0)
    fail(ctx.source, object, "dataset not readable");
  return t;
}

void read_group(hid_t loc, H5Group& g, const ReadContext& ctx, const std::string& where);

struct LinkVisit {
  H5Group* group;
  const ReadContext* ctx;
  const std::string* where;
  std::exception_ptr error;
};

herr_t on_link(hid_t loc, const char* name, const H5L_info_t* info, void* data) {
  auto* visit = static_cast<LinkVisit*>(data);
  try {
    const std::string object = join(*visit->where, name);
    LOCKSTEP_CHECK_AS(IOError, info->type == H5L_TYPE_HARD, visit->ctx->source, ": ", object,
                      ": a soft or external link; Keras's files hold none");
    Handle obj(H5Oopen(loc, name, H5P_DEFAULT), H5Oclose);
    if (!obj.ok()) fail(visit->ctx->source, object, "object not readable");
    switch (H5Iget_type(obj.get())) {
      case H5I_GROUP:
        read_group(obj.get(), visit->group->groups[name], *visit->ctx, object);
        break;
      case H5I_DATASET:
        visit->group->datasets[name] = read_dataset(obj.get(), *visit->ctx, object);
        break;
      default:
        detail::throw_error<IOError>(visit->ctx->source, ": ", object,
                                     ": neither a group nor a dataset");
    }
  } catch (...) {
    visit->error = std::current_exception();
    return -1;
  }
  return 0;
}

void read_group(hid_t loc, H5Group& g, const ReadContext& ctx, const std::string& where) {
  read_attributes(loc, g, ctx, where.empty() ? "/" : where);
  LinkVisit visit{&g, &ctx, &where, nullptr};
  const herr_t status = H5Literate(loc, H5_INDEX_NAME, H5_ITER_INC, nullptr, on_link, &visit);
  if (visit.error) std::rethrow_exception(visit.error);
  if (status < 0) fail(ctx.source, where.empty() ? "/" : where, "group not listed");
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

H5Group read_h5_image(const std::string& bytes, const std::string& source) {
  LOCKSTEP_CHECK_AS(
      IOError, looks_like_h5(bytes.substr(0, 8)), source,
      ": not an HDF5 file (byte 0: expected the signature \\x89HDF\\r\\n\\x1a\\n, "
      "found ",
      bytes.size() < 8 ? "only " + std::to_string(bytes.size()) + " bytes" : "other bytes", ")");
  std::lock_guard lock(hdf5_mutex());
  quiet_hdf5();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_core(fapl.get(), 1 << 16, /*backing_store=*/0);
  if (H5Pset_file_image(fapl.get(), const_cast<char*>(bytes.data()), bytes.size()) < 0)
    fail(source, "", "file image not taken");
  Handle file(H5Fopen(image_name().c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!file.ok()) fail(source, "", "not a readable HDF5 file");
  H5Group root;
  // A dataset may hold at most 1024 times the file's bytes (compressed data
  // expands; more than that is a bomb, not weights).
  const ReadContext ctx{source, std::max<std::uint64_t>(1 << 20, bytes.size()) * 1024};
  read_group(file.get(), root, ctx, "");
  return root;
}

H5Group read_h5(const std::string& path) {
  const std::uint64_t size = regular_file_size(path);
  std::ifstream in(path, std::ios::binary);
  LOCKSTEP_CHECK_AS(IOError, in.good(), path, ": cannot open (", std::strerror(errno), ")");
  std::string bytes(size, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  LOCKSTEP_CHECK_AS(IOError, static_cast<std::uint64_t>(in.gcount()) == size, path, ": read ",
                    in.gcount(), " of its ", size, " bytes");
  return read_h5_image(bytes, path);
}

}  // namespace lockstep::io
