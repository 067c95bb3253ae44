// cache(): in memory, or in a file that the first complete pass writes.
//
// Cache file layout (little-endian):
//   "LSCACHE1"
//   per element:  u32 'LSEL' | u32 components | per component: u8 dtype,
//                 u8 rank, u16 name length, name, i64 dims[rank], u64 bytes,
//                 data | u32 crc32c of the record up to here
//   footer:       u32 'LSEN' | u64 element count | u32 crc32c of the count
// The file appears under its name only once complete (AtomicFileWriter), and
// every record is checked as it is read.
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <mutex>

#include "internal.h"
#include "lockstep/core/file.h"

namespace lockstep::data {
namespace {

using Input = std::shared_ptr<const DatasetImpl>;

constexpr char kFileMagic[8] = {'L', 'S', 'C', 'A', 'C', 'H', 'E', '1'};
constexpr std::uint32_t kRecordMagic = 0x4C45534Cu;  // "LSEL"
constexpr std::uint32_t kFooterMagic = 0x4E45534Cu;  // "LSEN"
constexpr std::size_t kFooterBytes = 4 + 8 + 4;

template <typename T>
void append(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void write_record(AtomicFileWriter& out, const Element& e, std::string& scratch) {
  scratch.clear();
  append<std::uint32_t>(scratch, kRecordMagic);
  append<std::uint32_t>(scratch, static_cast<std::uint32_t>(e.size()));
  std::uint32_t crc = 0;
  for (std::size_t c = 0; c < e.size(); ++c) {
    const Tensor& t = e[c];
    const std::string name = c < e.names().size() ? e.names()[c] : std::string();
    append<std::uint8_t>(scratch, static_cast<std::uint8_t>(t.dtype()));
    append<std::uint8_t>(scratch, static_cast<std::uint8_t>(t.rank()));
    append<std::uint16_t>(scratch, static_cast<std::uint16_t>(name.size()));
    scratch += name;
    for (int d = 0; d < t.rank(); ++d) append<std::int64_t>(scratch, t.dim(d));
    append<std::uint64_t>(scratch, t.nbytes());
    crc = crc32c(scratch.data(), scratch.size(), crc);
    out.write(scratch.data(), scratch.size());
    scratch.clear();
    crc = crc32c(t.raw_data(), t.nbytes(), crc);
    out.write(t.raw_data(), t.nbytes());
  }
  crc = crc32c(scratch.data(), scratch.size(), crc);
  append<std::uint32_t>(scratch, crc);
  out.write(scratch.data(), scratch.size());
}

// Reads a complete cache file record by record.
class CacheFileReader {
 public:
  explicit CacheFileReader(std::string path) : path_(std::move(path)) {
    size_ = regular_file_size(path_);
    in_.open(path_, std::ios::binary);
    if (!in_) detail::throw_error<IOError>(path_, ": cannot open the cache file");
    char magic[8] = {};
    if (size_ < sizeof(kFileMagic) + kFooterBytes || !in_.read(magic, 8) ||
        std::memcmp(magic, kFileMagic, 8) != 0)
      bad(0, "is not a Lockstep cache file (no LSCACHE1 header or too short: " +
                 std::to_string(size_) + " bytes)");
    in_.seekg(static_cast<std::streamoff>(size_ - kFooterBytes));
    std::uint32_t fmagic = 0, fcrc = 0;
    read_raw(&fmagic, 4, size_ - kFooterBytes);
    read_raw(&count_, 8, size_ - kFooterBytes + 4);
    read_raw(&fcrc, 4, size_ - 4);
    if (fmagic != kFooterMagic || fcrc != crc32c(&count_, 8))
      bad(size_ - kFooterBytes, "has no valid footer (the file is truncated or corrupt)");
    data_end_ = size_ - kFooterBytes;
    seek(8, 0);
  }

  std::uint64_t count() const { return count_; }
  std::uint64_t offset() const { return offset_; }
  std::uint64_t index() const { return index_; }

  void seek(std::uint64_t offset, std::uint64_t index) {
    if (offset < 8 || offset > data_end_ || index > count_)
      bad(offset, "cannot resume at element " + std::to_string(index));
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    offset_ = offset;
    index_ = index;
  }

  std::optional<Element> next() {
    if (index_ >= count_) {
      if (offset_ != data_end_)
        bad(offset_, "has data after its last element (" + std::to_string(count_) + " promised)");
      return std::nullopt;
    }
    const std::uint64_t start = offset_;
    std::uint32_t crc = 0, magic = 0, n = 0;
    read_checked(&magic, 4, crc);
    if (magic != kRecordMagic)
      bad(start, "element " + std::to_string(index_) + " has no record marker");
    read_checked(&n, 4, crc);
    if (n > 4096)
      bad(start,
          "element " + std::to_string(index_) + " claims " + std::to_string(n) + " components");
    std::vector<Tensor> parts;
    std::vector<std::string> names;
    for (std::uint32_t c = 0; c < n; ++c) {
      std::uint8_t dtype = 0, rank = 0;
      std::uint16_t name_len = 0;
      read_checked(&dtype, 1, crc);
      read_checked(&rank, 1, crc);
      read_checked(&name_len, 2, crc);
      if (dtype > static_cast<std::uint8_t>(DType::kBool) || rank > Shape::kMaxRank)
        bad(offset_, "element " + std::to_string(index_) + " component " + std::to_string(c) +
                         " has dtype code " + std::to_string(dtype) + " and rank " +
                         std::to_string(rank));
      std::string name(name_len, '\0');
      read_checked(name.data(), name_len, crc);
      std::vector<std::int64_t> dims(rank);
      for (auto& d : dims) {
        read_checked(&d, 8, crc);
        if (d < 0) bad(offset_, "negative dimension");
      }
      std::uint64_t nbytes = 0;
      read_checked(&nbytes, 8, crc);
      const Shape shape(dims);
      const auto dt = static_cast<DType>(dtype);
      if (nbytes != static_cast<std::uint64_t>(shape.numel()) * dtype_size(dt) ||
          nbytes > data_end_ - offset_)
        bad(offset_, "element " + std::to_string(index_) + " component " + std::to_string(c) +
                         " promises " + std::to_string(nbytes) + " bytes for shape " +
                         shape.to_string() + " with " + std::to_string(data_end_ - offset_) +
                         " left");
      Tensor t = Tensor::empty(shape, dt);
      read_checked(t.raw_data(), nbytes, crc);
      parts.push_back(std::move(t));
      names.push_back(std::move(name));
    }
    std::uint32_t stored = 0;
    const std::uint64_t crc_at = offset_;
    read_raw(&stored, 4, offset_);
    offset_ += 4;
    if (stored != crc)
      bad(crc_at, "element " + std::to_string(index_) + " fails its checksum (record at byte " +
                      std::to_string(start) + ")");
    ++index_;
    bool named = false;
    for (const auto& s : names) named = named || !s.empty();
    return Element(std::move(parts), named ? std::move(names) : std::vector<std::string>{});
  }

 private:
  [[noreturn]] void bad(std::uint64_t offset, const std::string& what) const {
    detail::throw_error<IOError>(path_, ": at byte offset ", offset, ": the cache file ", what);
  }
  void read_raw(void* dst, std::size_t n, std::uint64_t at) {
    if (!in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n)))
      bad(at, "ends early (wanted " + std::to_string(n) + " more bytes)");
  }
  void read_checked(void* dst, std::size_t n, std::uint32_t& crc) {
    if (offset_ + n > data_end_)
      bad(offset_, "element " + std::to_string(index_) + " runs past the data section");
    read_raw(dst, n, offset_);
    offset_ += n;
    crc = crc32c(dst, n, crc);
  }

  std::string path_;
  std::ifstream in_;
  std::uint64_t size_ = 0, data_end_ = 0, count_ = 0, offset_ = 0, index_ = 0;
};

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

class CacheDataset final : public DatasetImpl {
 public:
  CacheDataset(Input input, std::string filename)
      : input_(std::move(input)), filename_(std::move(filename)) {}
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override;

  const DatasetImpl& input() const { return *input_; }
  const std::string& filename() const { return filename_; }
  bool in_memory() const { return filename_.empty(); }
  // In memory only: workers on one host would share a cache file.
  std::shared_ptr<const DatasetImpl> with_sharded_files(std::int64_t n,
                                                        std::int64_t i) const override {
    if (!in_memory()) return nullptr;
    Input sharded = input_->with_sharded_files(n, i);
    return sharded ? std::make_shared<CacheDataset>(std::move(sharded), filename_) : nullptr;
  }

  // The cached elements (null until a pass completes) and the key of the
  // pass that filled them.
  std::shared_ptr<const std::vector<Element>> memory(std::uint64_t* fill_key = nullptr) const {
    std::lock_guard lk(mu_);
    if (fill_key && memory_) *fill_key = memory_key_;
    return memory_;
  }
  void publish(std::vector<Element> elements, std::uint64_t fill_key) const {
    std::lock_guard lk(mu_);
    if (memory_) return;  // another iterator finished first: same elements
    memory_ = std::make_shared<const std::vector<Element>>(std::move(elements));
    memory_key_ = fill_key;
  }

 private:
  Input input_;
  std::string filename_;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const std::vector<Element>> memory_;  // set by the first complete pass
  mutable std::uint64_t memory_key_ = 0;
};

class CacheIterator final : public IteratorImpl {
 public:
  CacheIterator(const CacheDataset& ds, std::uint64_t key)
      : IteratorImpl("cache"), ds_(ds), fill_key_(key) {}

  std::optional<Element> next() override {
    if (mode_ == Mode::kNew) begin();
    if (mode_ == Mode::kRead) {
      if (reader_) return reader_->next();
      if (index_ >= memory_->size()) return std::nullopt;
      return (*memory_)[index_++];
    }
    if (mode_ == Mode::kDone) return std::nullopt;
    auto e = input_->next();
    if (!e) {
      finish_write();
      return std::nullopt;
    }
    ++written_;
    if (writer_)
      write_record(*writer_, *e, scratch_);
    else if (!partial_)
      pending_.push_back(*e);
    return e;
  }

 protected:
  void save_fields(StateWriter& w) override {
    w.json()["fill_key"] = fill_key_;
    w.json()["mode"] = static_cast<int>(mode_);
    w.json()["written"] = written_;
    if (mode_ == Mode::kRead) {
      w.json()["index"] = reader_ ? reader_->index() : index_;
      w.json()["offset"] = reader_ ? reader_->offset() : 0;
    }
    if (mode_ == Mode::kWrite) save_child(w, "input", *input_);
  }
  void restore_fields(const StateReader& r) override {
    fill_key_ = r.at("fill_key").get<std::uint64_t>();
    const auto mode = static_cast<Mode>(r.at("mode").get<int>());
    written_ = r.at("written").get<std::uint64_t>();
    reader_.reset();
    writer_.reset();
    pending_.clear();
    mode_ = Mode::kNew;
    if (mode == Mode::kWrite) {
      // The elements before the save are not here: finish this pass from the
      // input without caching it; a later pass fills the cache.
      input_ = ds_.input().make_iterator(fill_key_);
      restore_child(r, "input", *input_);
      mode_ = Mode::kWrite;
      partial_ = true;
    } else if (mode == Mode::kRead) {
      const auto index = r.at("index").get<std::uint64_t>();
      if (ds_.in_memory()) {
        std::uint64_t cached_key = fill_key_;
        memory_ = ds_.memory(&cached_key);
        LOCKSTEP_CHECK(!memory_ || cached_key == fill_key_,
                       "Iterator::restore: this cache was "
                       "filled by another pass than the saved iterator's (iterate the restored "
                       "pipeline from a fresh Dataset)");
        // A new process: refill the cache exactly as the first pass did.
        if (!memory_) refill_memory();
        LOCKSTEP_CHECK(index <= memory_->size(), "Iterator::restore: cache index ", index,
                       " is past the ", memory_->size(), " cached elements");
        index_ = index;
      } else {
        LOCKSTEP_CHECK_AS(IOError, file_exists(ds_.filename()), ds_.filename(),
                          ": the cache file was removed after the iterator state was saved");
        reader_ = std::make_unique<CacheFileReader>(ds_.filename());
        reader_->seek(r.at("offset").get<std::uint64_t>(), index);
      }
      mode_ = Mode::kRead;
    } else {
      mode_ = mode;
    }
  }

 private:
  enum class Mode { kNew = 0, kRead = 1, kWrite = 2, kDone = 3 };

  void begin() {
    if (ds_.in_memory()) {
      memory_ = ds_.memory(&fill_key_);
      if (memory_) {
        mode_ = Mode::kRead;
        return;
      }
    } else if (file_exists(ds_.filename())) {
      reader_ = std::make_unique<CacheFileReader>(ds_.filename());
      mode_ = Mode::kRead;
      return;
    } else {
      remove_stale_temporaries(ds_.filename());
      writer_ = std::make_unique<AtomicFileWriter>(ds_.filename());
      writer_->write(kFileMagic, sizeof(kFileMagic));
    }
    input_ = ds_.input().make_iterator(fill_key_);
    mode_ = Mode::kWrite;
  }

  void finish_write() {
    mode_ = Mode::kDone;
    input_.reset();
    if (partial_) {
      // Restored mid-pass: the elements before the save are not here. Fill
      // the cache from a fresh pass with the first pass's key, so later
      // passes replay exactly what an uninterrupted run would have cached.
      fill_from_scratch();
      return;
    }
    if (writer_) {
      std::string footer;
      append<std::uint32_t>(footer, kFooterMagic);
      append<std::uint64_t>(footer, written_);
      append<std::uint32_t>(footer, crc32c(&written_, 8));
      writer_->write(footer.data(), footer.size());
      writer_->commit();
      writer_.reset();
    } else {
      ds_.publish(std::move(pending_), fill_key_);
    }
  }

  void fill_from_scratch() {
    partial_ = false;
    pending_.clear();
    written_ = 0;
    if (!ds_.in_memory()) {
      if (file_exists(ds_.filename())) return;  // another iterator or process finished it
      writer_ = std::make_unique<AtomicFileWriter>(ds_.filename());
      writer_->write(kFileMagic, sizeof(kFileMagic));
    } else if (ds_.memory()) {
      return;
    }
    input_ = ds_.input().make_iterator(fill_key_);
    while (auto e = input_->next()) {
      ++written_;
      if (writer_)
        write_record(*writer_, *e, scratch_);
      else
        pending_.push_back(std::move(*e));
    }
    finish_write();
  }

  void refill_memory() {
    auto in = ds_.input().make_iterator(fill_key_);
    std::vector<Element> all;
    while (auto e = in->next()) all.push_back(std::move(*e));
    ds_.publish(std::move(all), fill_key_);
    memory_ = ds_.memory();
  }

  const CacheDataset& ds_;
  std::uint64_t fill_key_;
  Mode mode_ = Mode::kNew;
  std::unique_ptr<IteratorImpl> input_;
  // Reading
  std::shared_ptr<const std::vector<Element>> memory_;
  std::size_t index_ = 0;
  std::unique_ptr<CacheFileReader> reader_;
  // Writing
  std::unique_ptr<AtomicFileWriter> writer_;
  std::vector<Element> pending_;
  std::string scratch_;
  std::uint64_t written_ = 0;
  bool partial_ = false;
};

std::unique_ptr<IteratorImpl> CacheDataset::make_iterator(std::uint64_t key) const {
  return std::make_unique<CacheIterator>(*this, key);
}

}  // namespace

std::shared_ptr<const DatasetImpl> make_cache(Input input, std::string filename) {
  return std::make_shared<CacheDataset>(std::move(input), std::move(filename));
}

}  // namespace lockstep::data
