// The memory of recorded graphs, as the CUDA adapter (runtime.cu) and the
// tests' emulated adapter keep it: plain C++ compiled into both, as
// element_rules.h, so that CI runs the GPU's bookkeeping. Not thread-safe:
// the adapters call it under their own lock.
//
// A graph's kernels took their pointers when they were recorded, so every
// block a recording allocated stays the graph's for all its launches,
// whatever its tensor does later. A block a tensor gives back while its
// stream still records is handed again to a later allocation of the same
// recording (the smallest that holds it, at most twice its size): a
// recording is one stream's work in order, and so is each launch, so the
// block's earlier kernels are done with it before the later ones use it.
// A recording then holds about what an eager step holds at its peak, not
// every byte the step ever asked for (DeviceOps.ARecordingHoldsAbout-
// ItsEagerStepsPeak on the emulated GPU, batch 8: MobileNetV2 of 32×32
// images in float32 held 27.4 MB without reuse and 20.0 MB with it, its
// eager step's peak 15.4 MB above what stays; the small CNN in
// mixed_bfloat16 9.5 and 4.1 MB, its peak 2.6 MB).
//
// A block from before the recording that a tensor gives back during it (a
// recorded kernel may read it) is adopted: kept, without reuse (its size
// is not known here), and freed with the graph.
#pragma once

#include <cstddef>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace lockstep::backend::cuda {

class GraphMemory {
 public:
  // While `graph` records: a block of it given back earlier in this
  // recording that holds `bytes`, now in use again; null when none fits.
  void* reuse(const void* graph, std::size_t bytes) {
    auto f = free_.find(graph);
    if (f == free_.end()) return nullptr;
    auto it = f->second.lower_bound(bytes);
    if (it == f->second.end() || it->first / 2 > bytes) return nullptr;
    void* p = it->second;
    f->second.erase(it);
    blocks_.at(p).given_back = false;
    return p;
  }
  // A block just allocated, of `bytes`, for `graph` while it records.
  void add(const void* graph, void* p, std::size_t bytes) {
    blocks_[p] = Block{graph, bytes, false};
  }

  enum class GiveBack {
    kNotAGraphs,  // the caller frees it as any block
    kKept,        // a graph keeps it for its launches
    kFreeNow,     // its graph is gone: the caller frees it (a graph's block)
  };
  // A tensor gives back `p`; `recording` is the graph its stream records
  // now, or null. Giving a graph's block back twice is an error.
  GiveBack give_back(void* p, const void* recording) {
    auto it = blocks_.find(p);
    if (it == blocks_.end()) {
      if (recording == nullptr) return GiveBack::kNotAGraphs;
      blocks_[p] = Block{recording, 0, true};  // adopted, not reused
      return GiveBack::kKept;
    }
    Block& b = it->second;
    if (b.given_back) throw std::runtime_error("a graph's memory given back twice");
    if (b.graph == nullptr) {
      blocks_.erase(it);
      return GiveBack::kFreeNow;
    }
    b.given_back = true;
    if (b.graph == recording && b.bytes > 0) free_[recording].emplace(b.bytes, p);
    return GiveBack::kKept;
  }

  // `graph`'s recording has ended: nothing more is allocated for it.
  void recorded(const void* graph) { free_.erase(graph); }

  // A block to free when its graph is destroyed; `adopted`: from before
  // the recording (on a GPU, the pool's), else the graph's own.
  struct ToFree {
    void* block = nullptr;
    bool adopted = false;
    bool operator==(const ToFree&) const = default;
  };
  // `graph` is destroyed: the blocks to free now (their tensors gave them
  // back); the others are freed when their tensors do (kFreeNow).
  std::vector<ToFree> destroyed(const void* graph) {
    free_.erase(graph);
    std::vector<ToFree> now;
    for (auto it = blocks_.begin(); it != blocks_.end();) {
      if (it->second.graph != graph) {
        ++it;
      } else if (it->second.given_back) {
        now.push_back({it->first, it->second.bytes == 0});
        it = blocks_.erase(it);
      } else {
        it->second.graph = nullptr;
        ++it;
      }
    }
    return now;
  }

  // The bytes `graph` holds (its adopted blocks not counted).
  std::size_t bytes(const void* graph) const {
    std::size_t total = 0;
    for (const auto& [p, b] : blocks_) {
      if (b.graph == graph) total += b.bytes;
    }
    return total;
  }

 private:
  struct Block {
    const void* graph = nullptr;  // null once the graph is destroyed
    std::size_t bytes = 0;        // 0: adopted
    bool given_back = false;
  };
  std::unordered_map<void*, Block> blocks_;
  std::unordered_map<const void*, std::multimap<std::size_t, void*>> free_;  // while recording
};

}  // namespace lockstep::backend::cuda
