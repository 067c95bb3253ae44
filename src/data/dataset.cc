// Dataset and Iterator handles, elements, and the iterator-state tree.
#include "lockstep/data/dataset.h"

#include <atomic>
#include <cstring>
#include <random>

#include "internal.h"
#include "lockstep/core/checked.h"
#include "lockstep/tensor/random.h"

namespace lockstep::data {

// ---- Element ----

Element::Element(std::vector<Tensor> components, std::vector<std::string> names)
    : components_(std::move(components)), names_(std::move(names)) {
  LOCKSTEP_CHECK(names_.empty() || names_.size() == components_.size(), "Element: ", names_.size(),
                 " names for ", components_.size(), " components");
  for (std::size_t i = 0; i < names_.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j)
      LOCKSTEP_CHECK(names_[i] != names_[j], "Element: the name '", names_[i], "' is used twice");
  }
}

const Tensor& Element::operator[](std::size_t i) const {
  LOCKSTEP_CHECK_AS(IndexError, i < components_.size(), "Element: component ", i,
                    " out of range (the element has ", components_.size(), ")");
  return components_[i];
}

Tensor& Element::operator[](std::size_t i) {
  LOCKSTEP_CHECK_AS(IndexError, i < components_.size(), "Element: component ", i,
                    " out of range (the element has ", components_.size(), ")");
  return components_[i];
}

const Tensor& Element::operator[](std::string_view name) const {
  for (std::size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) return components_[i];
  }
  std::string known;
  for (const auto& n : names_) known += (known.empty() ? "" : ", ") + n;
  detail::throw_error<IndexError>("Element: no component named '", name, "' (it has ",
                                  names_.empty() ? "no names" : known, ")");
}

std::string Element::string(std::size_t i) const {
  const Tensor& t = (*this)[i];
  LOCKSTEP_CHECK(t.dtype() == DType::kUInt8 && t.rank() == 1, "Element::string: component ", i,
                 " must be a 1-D uint8 tensor of bytes, got ", t.dtype(), " ", t.shape());
  return {reinterpret_cast<const char*>(t.data<std::uint8_t>()),
          static_cast<std::size_t>(t.numel())};
}

Tensor Element::string_tensor(std::string_view s) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(s.size())}, DType::kUInt8);
  if (!s.empty()) std::memcpy(t.raw_data(), s.data(), s.size());
  return t;
}

std::size_t Element::nbytes() const {
  std::size_t n = 0;
  for (const auto& t : components_) n += t.defined() ? t.nbytes() : 0;
  return n;
}

// ---- Helpers ----

Element DatasetImpl::element_at(std::int64_t) const {
  detail::throw_error<Error>("element_at: this dataset node reads its elements in order only");
}

Element DatasetImpl::gather(const std::vector<std::int64_t>& indices, const char* op) const {
  std::vector<Element> rows;
  rows.reserve(indices.size());
  for (std::int64_t i : indices) rows.push_back(element_at(i));
  return stack_elements(op, rows);
}

std::uint64_t mix_key(std::uint64_t a, std::uint64_t b) {
  auto fmix = [](std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  return fmix(a + 0x9e3779b97f4a7c15ULL * (fmix(b) | 1));
}

std::uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

std::uint64_t uniform_index(std::uint64_t seed, std::uint64_t key, std::uint64_t counter,
                            std::uint64_t n) {
  const auto w = random::philox4x32(seed, key, counter);
  const std::uint64_t r = (static_cast<std::uint64_t>(w[0]) << 32) | w[1];
  // Lemire's multiply-shift: no modulo bias worth measuring for n < 2^32.
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(r) * n) >> 64);
}

Element stack_elements(const char* op, const std::vector<Element>& elements) {
  LOCKSTEP_CHECK(!elements.empty(), op, ": nothing to stack");
  const Element& first = elements[0];
  const auto n = static_cast<std::int64_t>(elements.size());
  std::vector<Tensor> out;
  out.reserve(first.size());
  for (std::size_t c = 0; c < first.size(); ++c) {
    const Tensor& t0 = first[c];
    for (std::size_t i = 1; i < elements.size(); ++i) {
      const Element& e = elements[i];
      LOCKSTEP_CHECK_AS(ShapeError, e.size() == first.size(), op, ": element ", i, " has ",
                        e.size(), " components but element 0 has ", first.size());
      LOCKSTEP_CHECK_AS(ShapeError, e[c].shape() == t0.shape() && e[c].dtype() == t0.dtype(), op,
                        ": element ", i, " of the batch has component ", c, " of ", e[c].dtype(),
                        " ", e[c].shape(), " but element 0 has ", t0.dtype(), " ", t0.shape(),
                        " (padded_batch pads differing shapes)");
    }
    std::vector<std::int64_t> dims{n};
    for (int d = 0; d < t0.rank(); ++d) dims.push_back(t0.dim(d));
    Tensor stacked = Tensor::empty(Shape(dims), t0.dtype());
    auto* dst = static_cast<char*>(stacked.raw_data());
    const std::size_t row = t0.nbytes();
    for (std::size_t i = 0; i < elements.size(); ++i)
      if (row) std::memcpy(dst + i * row, elements[i][c].raw_data(), row);
    out.push_back(std::move(stacked));
  }
  return Element(std::move(out), first.names());
}

// ---- State tree ----

StateWriter StateWriter::child(const std::string& name) {
  nlohmann::json& c = (*node_)[name];
  c = nlohmann::json::object();
  return StateWriter(*state_, c, prefix_ + name + "/");
}

void StateWriter::put_tensor(const std::string& name, const Tensor& t) {
  state_->tensors[prefix_ + name] = t;
}

namespace {

bool same_structure(const std::vector<Element>& elements) {
  const Element& first = elements[0];
  for (const Element& e : elements) {
    if (e.size() != first.size()) return false;
    for (std::size_t c = 0; c < e.size(); ++c) {
      if (e[c].shape() != first[c].shape() || e[c].dtype() != first[c].dtype()) return false;
    }
  }
  return true;
}

}  // namespace

void StateWriter::put_elements(const std::string& name, const std::vector<Element>& elements) {
  nlohmann::json& meta = (*node_)[name];
  meta = nlohmann::json::object();
  meta["count"] = elements.size();
  if (elements.empty()) return;
  meta["names"] = elements[0].names();
  if (same_structure(elements)) {
    // One tensor per component: a 60000-element shuffle buffer is two
    // tensors, not 120000.
    meta["stacked"] = true;
    meta["components"] = elements[0].size();
    const Element stacked = stack_elements("IteratorState", elements);
    for (std::size_t c = 0; c < stacked.size(); ++c)
      put_tensor(name + "/" + std::to_string(c), stacked[c]);
    return;
  }
  meta["stacked"] = false;
  nlohmann::json sizes = nlohmann::json::array();
  for (std::size_t i = 0; i < elements.size(); ++i) {
    sizes.push_back(elements[i].size());
    for (std::size_t c = 0; c < elements[i].size(); ++c)
      put_tensor(name + "/" + std::to_string(i) + "/" + std::to_string(c), elements[i][c]);
  }
  meta["sizes"] = sizes;
}

void StateWriter::put_element(const std::string& name, const Element& element) {
  put_elements(name, {element});
}

const nlohmann::json& StateReader::at(const std::string& key) const {
  const auto it = node_->find(key);
  LOCKSTEP_CHECK(it != node_->end(), "Iterator::restore: the state has no '", key, "' at '",
                 prefix_.empty() ? "/" : prefix_, "' (saved from a different pipeline?)");
  return *it;
}

StateReader StateReader::child(const std::string& name) const {
  const nlohmann::json& c = at(name);
  LOCKSTEP_CHECK(c.is_object(), "Iterator::restore: '", prefix_ + name, "' is not a node");
  return StateReader(*state_, c, prefix_ + name + "/");
}

const Tensor& StateReader::tensor(const std::string& name) const {
  const auto it = state_->tensors.find(prefix_ + name);
  LOCKSTEP_CHECK(it != state_->tensors.end(), "Iterator::restore: the state has no tensor '",
                 prefix_ + name, "'");
  return it->second;
}

std::vector<Element> StateReader::elements(const std::string& name) const {
  const nlohmann::json& meta = at(name);
  const auto count = meta.at("count").get<std::size_t>();
  std::vector<Element> out;
  if (count == 0) return out;
  const auto names = meta.at("names").get<std::vector<std::string>>();
  out.reserve(count);
  if (meta.at("stacked").get<bool>()) {
    const auto components = meta.at("components").get<std::size_t>();
    std::vector<Tensor> stacked;
    for (std::size_t c = 0; c < components; ++c) {
      const Tensor& t = tensor(name + "/" + std::to_string(c));
      LOCKSTEP_CHECK(t.rank() >= 1 && t.dim(0) == static_cast<std::int64_t>(count),
                     "Iterator::restore: '", prefix_ + name, "/", c, "' has shape ", t.shape(),
                     ", expected ", count, " rows");
      stacked.push_back(t);
    }
    for (std::size_t i = 0; i < count; ++i) {
      std::vector<Tensor> parts;
      for (const Tensor& t : stacked) {
        std::vector<std::int64_t> dims(t.shape().dims().begin() + 1, t.shape().dims().end());
        const auto row = static_cast<std::int64_t>(i);
        parts.push_back(t.view_rows(row, row + 1).view_as(Shape(dims)));
      }
      out.emplace_back(std::move(parts), names);
    }
    return out;
  }
  const auto sizes = meta.at("sizes").get<std::vector<std::size_t>>();
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<Tensor> parts;
    for (std::size_t c = 0; c < sizes.at(i); ++c)
      parts.push_back(tensor(name + "/" + std::to_string(i) + "/" + std::to_string(c)));
    out.emplace_back(std::move(parts), names);
  }
  return out;
}

Element StateReader::element(const std::string& name) const {
  auto v = elements(name);
  LOCKSTEP_CHECK(v.size() == 1, "Iterator::restore: '", prefix_ + name, "' holds ", v.size(),
                 " elements, expected 1");
  return std::move(v[0]);
}

void IteratorImpl::save(StateWriter& w) {
  w.json()["op"] = op_;
  save_fields(w);
}

void IteratorImpl::restore(const StateReader& r) {
  const auto& op = r.at("op");
  LOCKSTEP_CHECK(op.is_string() && op.get<std::string>() == op_,
                 "Iterator::restore: the state was saved from a different pipeline: at '",
                 r.path().empty() ? "/" : r.path(), "' it has '",
                 op.is_string() ? op.get<std::string>() : op.dump(), "' where this pipeline has '",
                 op_, "'");
  restore_fields(r);
}

// ---- Iterator ----

Iterator::Iterator(std::shared_ptr<const DatasetImpl> dataset, std::unique_ptr<IteratorImpl> impl)
    : dataset_(std::move(dataset)), impl_(std::move(impl)) {}
Iterator::~Iterator() = default;
Iterator::Iterator(Iterator&&) noexcept = default;
Iterator& Iterator::operator=(Iterator&&) noexcept = default;

std::optional<Element> Iterator::next() {
  LOCKSTEP_CHECK(impl_ != nullptr, "Iterator: not made from a Dataset");
  auto e = impl_->next();
  if (e) ++position_;
  return e;
}

Element Iterator::get_next() {
  auto e = next();
  LOCKSTEP_CHECK_AS(IndexError, e.has_value(), "Iterator::get_next: end of sequence after ",
                    position_, " elements");
  return std::move(*e);
}

IteratorState Iterator::save() {
  LOCKSTEP_CHECK(impl_ != nullptr, "Iterator: not made from a Dataset");
  IteratorState state;
  nlohmann::json tree = {{"position", position_}, {"pipeline", nlohmann::json::object()}};
  StateWriter root(state, tree["pipeline"], "");
  impl_->save(root);
  state.json = tree.dump();
  return state;
}

void Iterator::restore(const IteratorState& state) {
  LOCKSTEP_CHECK(impl_ != nullptr, "Iterator: not made from a Dataset");
  check_json_nesting(state.json, "Iterator::restore: the iterator state");
  const nlohmann::json tree =
      nlohmann::json::parse(state.json, nullptr, /*allow_exceptions=*/false);
  LOCKSTEP_CHECK(!tree.is_discarded(),
                 "Iterator::restore: not an iterator state (its JSON does not "
                 "parse: '",
                 state.json.substr(0, 80), "')");
  const auto p = tree.find("pipeline");
  LOCKSTEP_CHECK(p != tree.end() && p->is_object() && tree.contains("position"),
                 "Iterator::restore: not an iterator state (no 'pipeline' / 'position')");
  impl_->restore(StateReader(state, *p, ""));
  position_ = tree.at("position").get<std::int64_t>();
}

// ---- Dataset ----

const DatasetImpl& Dataset::checked(const char* op) const {
  LOCKSTEP_CHECK(impl_ != nullptr, "Dataset::", op, ": the dataset is undefined");
  return *impl_;
}

std::int64_t Dataset::cardinality() const { return checked("cardinality").cardinality(); }

Iterator Dataset::make_iterator(IteratorOptions options) const {
  return Iterator(impl_,
                  checked("make_iterator").make_iterator(mix_key(0x11f0cafe, options.epoch)));
}

Dataset::RangeIterator::RangeIterator(std::shared_ptr<Iterator> it) : it_(std::move(it)) {
  current_ = it_->next();
}

Dataset::RangeIterator& Dataset::RangeIterator::operator++() {
  current_ = it_->next();
  return *this;
}

Dataset::RangeIterator Dataset::begin() const {
  return RangeIterator(std::make_shared<Iterator>(make_iterator()));
}

}  // namespace lockstep::data
