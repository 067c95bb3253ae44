// Model::summary: Keras 3's print_summary (keras/src/utils/summary_utils.py)
// as rich renders it without colour: a heavy-headed box table whose column
// widths come from Keras's positions, shrunk the way rich shrinks fixed-width
// columns that do not fit (ratio_reduce over the excess).
#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "lockstep/core/log.h"
#include "lockstep/nn/functional.h"
#include "lockstep/train/model.h"

namespace lockstep {
namespace {

std::string with_commas(std::int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string readable_memory_size(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  char buf[64];
  for (const char* unit : units) {
    if (bytes / 1024 < 1) {
      std::snprintf(buf, sizeof(buf), "%.2f %s", bytes, unit);
      return buf;
    }
    bytes /= 1024;
  }
  std::snprintf(buf, sizeof(buf), "%.2f PB", bytes);
  return buf;
}

int terminal_columns() {
  winsize w{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  return 80;  // Python's shutil.get_terminal_size fallback
}

// Python's round(): half to even.
long round_half_even(double v) { return std::lrint(v); }

// rich.table's last-resort shrink of columns that do not fit.
std::vector<int> ratio_reduce(int total, std::vector<int> values) {
  int total_ratio = static_cast<int>(values.size());
  int remaining = total;
  for (int& v : values) {
    const int distributed = std::min(
        v, static_cast<int>(round_half_even(static_cast<double>(remaining) / total_ratio)));
    v -= distributed;
    remaining -= distributed;
    --total_ratio;
  }
  return values;
}

std::size_t display_width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// rich's divide_line without folding, then its "ellipsis" overflow (the
// default for table columns): words are runs of non-space with their
// trailing spaces; a word that does not fit starts a new line; a line still
// wider than the column is cut to width - 1 characters and "…".
std::vector<std::string> wrap(const std::string& text, std::size_t width) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = i;
    while (j < text.size() && text[j] == ' ') ++j;
    while (j < text.size() && text[j] != ' ') ++j;
    while (j < text.size() && text[j] == ' ') ++j;
    words.push_back(text.substr(i, j - i));
    i = j;
  }
  std::vector<std::string> lines{""};
  for (const std::string& word : words) {
    std::string trimmed = word;
    while (!trimmed.empty() && trimmed.back() == ' ') trimmed.pop_back();
    const std::size_t position = display_width(lines.back());
    const std::size_t remaining = width > position ? width - position : 0;
    if (remaining >= display_width(trimmed)) {
      lines.back() += word;
    } else if (lines.back().empty()) {
      lines.back() = word;
    } else {
      lines.push_back(word);
    }
  }
  for (std::string& line : lines) {
    while (display_width(line) > width && !line.empty() && line.back() == ' ') line.pop_back();
    if (display_width(line) > width)
      line = line.substr(0, width - 1) + "\u2026";  // ASCII names: bytes = cells
  }
  return lines;
}

struct Row {
  std::vector<std::string> cells;
};

std::string shape_of(const KerasTensor& k) { return k.shape_string(); }

// The rows of a functional model, in Keras's order (map_graph's: operations
// by decreasing depth, ties by first visit from the outputs), with a
// "Connected to" cell; `sequential_like` is set false unless the graph is
// one chain.
std::vector<Row> functional_rows(const FunctionalImpl& graph, bool& sequential_like) {
  const FunctionalImpl* f = &graph;
  std::vector<Row> rows;
  // Node index of each call of a layer, for "Connected to".
  std::map<const KerasTensor::Node*, int> node_index;
  std::map<const LayerImpl*, int> seen_calls;
  for (const auto& step : f->steps()) node_index[step.node] = seen_calls[step.node->layer.get()]++;
  auto source_name = [&](const KerasTensor& k) {
    const KerasTensor::Node* n = k.node().get();
    const std::string name = n->layer ? n->layer->name() : n->input_name;
    const int index = n->layer ? node_index[n] : 0;
    return name + "[" + std::to_string(index) + "][" + std::to_string(k.index()) + "]";
  };
  // Row order as Keras's map_graph: operations by decreasing depth (distance
  // from the outputs), ties by first visit in a depth-first walk from the
  // outputs.
  using NodeP = const KerasTensor::Node*;
  auto op_of = [](NodeP n) -> const void* {
    return n->layer ? static_cast<const void*>(n->layer.get()) : n;
  };
  std::vector<NodeP> post_order;
  std::map<const void*, int> op_index;
  std::set<NodeP> finished;
  std::function<void(const KerasTensor&)> walk = [&](const KerasTensor& k) {
    NodeP n = k.node().get();
    if (finished.count(n)) return;
    op_index.emplace(op_of(n), static_cast<int>(op_index.size()));
    for (const KerasTensor& in : n->inputs) walk(in);
    finished.insert(n);
    post_order.push_back(n);
  };
  for (const KerasTensor& out : f->outputs()) walk(out);
  std::map<NodeP, int> node_depth;
  std::map<const void*, int> op_depth;
  for (auto it = post_order.rbegin(); it != post_order.rend(); ++it) {
    int depth = std::max(node_depth[*it], op_depth[op_of(*it)]);
    op_depth[op_of(*it)] = depth;
    node_depth[*it] = depth;
    for (const KerasTensor& in : (*it)->inputs) {
      int& d = node_depth[in.node().get()];
      d = std::max(d, depth + 1);
    }
  }
  // Keras's test for a graph that prints as Sequential (no "Connected to"
  // column): one node at each depth, none reading several tensors, and no
  // layer called twice. A layer whose several outputs are all read still
  // counts as one node.
  std::map<int, int> nodes_at_depth;
  std::map<const void*, int> calls;
  for (const auto& [node, depth] : node_depth) {
    if (++nodes_at_depth[depth] > 1 || node->inputs.size() > 1 || ++calls[op_of(node)] > 1)
      sequential_like = false;
  }
  std::vector<NodeP> first_node_of_op;
  std::set<const void*> seen_ops;
  for (NodeP n : post_order) {
    if (seen_ops.insert(op_of(n)).second) first_node_of_op.push_back(n);
  }
  std::stable_sort(first_node_of_op.begin(), first_node_of_op.end(), [&](NodeP a, NodeP b) {
    if (op_depth[op_of(a)] != op_depth[op_of(b)]) return op_depth[op_of(a)] > op_depth[op_of(b)];
    return op_index[op_of(a)] < op_index[op_of(b)];
  });
  std::map<const LayerImpl*, std::size_t> row_of;
  for (NodeP n : first_node_of_op) {
    if (!n->layer) {
      const KerasTensor* input = nullptr;
      for (const KerasTensor& in : f->inputs()) {
        if (in.node().get() == n) input = &in;
      }
      rows.push_back({{n->input_name + " (InputLayer)", input ? shape_of(*input) : "?", "0", "-"}});
      continue;
    }
    row_of[n->layer.get()] = rows.size();
    rows.push_back({{n->layer->name() + " (" + n->layer->class_name() + ")", "?",
                     with_commas(n->layer->count_params()), ""}});
  }
  // Every call of a layer: Keras shows the last call's shape and all connections.
  for (const auto& step : f->steps()) {
    Row& row = rows[row_of.at(step.node->layer.get())];
    row.cells[1] = shape_of(step.output);
    if (const auto& shapes = step.node->output_shapes; shapes.size() > 1) {
      // Keras's for a layer with several outputs: the list of their shapes.
      row.cells[1] = "[";
      for (std::size_t i = 0; i < shapes.size(); ++i)
        row.cells[1] +=
            (i ? ", " : "") + KerasTensor(nullptr, 0, shapes[i], DType::kFloat32).shape_string();
      row.cells[1] += "]";
    }
    for (const KerasTensor& in : step.node->inputs) {
      if (!row.cells[3].empty()) row.cells[3] += ", ";
      row.cells[3] += source_name(in);
    }
  }
  return rows;
}

// The table as rich draws it for Keras: a header, one row per layer, column
// widths from Keras's positions shrunk to `line_length`.
std::string table(const std::string& name, const std::vector<std::string>& header,
                  const std::vector<Row>& rows, const std::vector<double>& positions,
                  int line_length) {
  // Column widths: Keras's positions, plus rich's padding, shrunk to fit.
  std::vector<int> widths;
  int current = 0;
  for (double p : positions) {
    const int w = static_cast<int>(p * line_length) - current;
    LOCKSTEP_CHECK(w >= 4, "summary: line_length ", line_length, " is too narrow");
    widths.push_back(w + 2);
    current += w;
  }
  const int borders = static_cast<int>(widths.size()) + 1;
  int total = 0;
  for (int w : widths) total += w;
  if (total > line_length - borders) widths = ratio_reduce(total - (line_length - borders), widths);

  auto rule = [&](const char* left, const char* fill, const char* mid, const char* right) {
    std::string line = left;
    for (std::size_t c = 0; c < widths.size(); ++c) {
      for (int i = 0; i < widths[c]; ++i) line += fill;
      line += c + 1 < widths.size() ? mid : right;
    }
    return line + "\n";
  };
  auto row_line = [&](const std::vector<std::string>& cells, const char* bar) {
    std::vector<std::vector<std::string>> wrapped;
    std::size_t height = 1;
    for (std::size_t c = 0; c < widths.size(); ++c) {
      wrapped.push_back(wrap(cells[c], static_cast<std::size_t>(widths[c] - 2)));
      height = std::max(height, wrapped.back().size());
    }
    std::string lines;
    for (std::size_t l = 0; l < height; ++l) {
      std::string line = bar;
      for (std::size_t c = 0; c < widths.size(); ++c) {
        const std::size_t w = static_cast<std::size_t>(widths[c] - 2);
        std::string text = l < wrapped[c].size() ? wrapped[c][l] : "";
        if (c == 2) {  // right-justified: rich strips trailing spaces first
          while (!text.empty() && text.back() == ' ') text.pop_back();
        }
        const std::size_t pad = w > display_width(text) ? w - display_width(text) : 0;
        const bool right = c == 2;  // "Param #" is right-aligned
        line += ' ';
        if (right) line.append(pad, ' ');
        line += text;
        if (!right) line.append(pad, ' ');
        line += ' ';
        line += bar;
      }
      lines += line + "\n";
    }
    return lines;
  };

  std::ostringstream os;
  os << "Model: \"" << name << "\"\n";
  os << rule("\u250f", "\u2501", "\u2533", "\u2513");
  os << row_line(header, "\u2503");
  os << rule("\u2521", "\u2501", "\u2547", "\u2529");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i) os << rule("\u251c", "\u2500", "\u253c", "\u2524");
    os << row_line(rows[i].cells, "\u2502");
  }
  os << rule("\u2514", "\u2500", "\u2534", "\u2518");
  return os.str();
}

}  // namespace

void Model::summary(const SummaryOptions& options) const {
  LogStream out(LogLevel::kOutput);
  summary(out, options);
}

void Model::summary(std::ostream& out, const SummaryOptions& options) const {
  LOCKSTEP_CHECK(defined(), "summary: the model is undefined");
  std::vector<Row> rows;
  bool sequential_like = true;
  const LayerImpl& net = *impl_;

  // A static batch size that every input names (Input(..., batch_size),
  // SequentialOptions::batch_size: a stateful model's) is every shape's
  // first dimension, as Keras prints it; else None.
  std::vector<KerasTensor> inputs;
  if (auto* f = dynamic_cast<const FunctionalImpl*>(&net)) {
    inputs = f->inputs();
    rows = functional_rows(*f, sequential_like);
  } else if (auto* s = dynamic_cast<const SequentialImpl*>(&net)) {
    if (s->input().defined()) inputs = {s->input()};
    for (std::size_t i = 0; i < s->layers().size(); ++i) {
      const Layer& l = s->layers()[i];
      const bool built = l->built();
      rows.push_back({{l.name() + " (" + l->class_name() + ")",
                       i < s->layer_outputs().size() ? shape_of(s->layer_outputs()[i]) : "?",
                       built ? with_commas(l->count_params()) : "0 (unbuilt)"}});
    }
  } else {  // subclassed: its tracked layers, as a sequence
    for (const auto& l : net.sublayers()) {
      rows.push_back({{l->name() + " (" + l->class_name() + ")", "?",
                       l->built() ? with_commas(l->count_params()) : "0 (unbuilt)"}});
    }
  }
  std::int64_t batch = 0;
  for (const KerasTensor& in : inputs) {
    const std::int64_t b = in.node() ? in.node()->input_batch_size : 0;
    batch = (&in == &inputs.front() || b == batch) ? b : 0;
    if (batch == 0) break;
  }
  if (batch > 0) {
    const std::string none = "(None", named = "(" + std::to_string(batch);
    for (Row& row : rows) {
      for (std::size_t at = row.cells[1].find(none); at != std::string::npos;
           at = row.cells[1].find(none, at + named.size()))
        row.cells[1].replace(at, none.size(), named);
    }
  }

  std::vector<double> positions = sequential_like ? std::vector<double>{0.45, 0.80, 1.0}
                                                  : std::vector<double>{0.3, 0.56, 0.74, 1.0};
  std::vector<std::string> header = {"Layer (type)", "Output Shape", "Param #"};
  if (!sequential_like) header.push_back("Connected to");
  for (Row& r : rows) r.cells.resize(header.size());
  int line_length = options.line_length;
  if (line_length <= 0) line_length = std::min(sequential_like ? 88 : 108, terminal_columns() - 4);

  std::ostringstream os;
  os << table(net.name(), header, rows, positions, line_length);

  auto count = [](const std::vector<Variable>& vars) {
    std::int64_t n = 0;
    double bytes = 0;
    for (const Variable& v : vars) {
      n += v.shape().numel();
      bytes +=
          static_cast<double>(v.shape().numel() * static_cast<std::int64_t>(dtype_size(v.dtype())));
    }
    return std::pair{n, bytes};
  };
  const auto [trainable, trainable_bytes] = count(net.trainable_weights());
  const auto [frozen, frozen_bytes] = count(net.non_trainable_weights());
  std::int64_t opt_count = 0;
  double opt_bytes = 0;
  const bool opt_built = compiled() && !optimizer()->variables().empty();
  if (opt_built) {
    std::tie(opt_count, opt_bytes) = count(optimizer()->variables());
    // Keras also counts the optimizer's step counter (int64) and learning rate (float32).
    opt_count += 2;
    opt_bytes += 12;
  }
  os << " Total params: " << with_commas(trainable + frozen + opt_count) << " ("
     << readable_memory_size(trainable_bytes + frozen_bytes + opt_bytes) << ")\n";
  os << " Trainable params: " << with_commas(trainable) << " ("
     << readable_memory_size(trainable_bytes) << ")\n";
  os << " Non-trainable params: " << with_commas(frozen) << " ("
     << readable_memory_size(frozen_bytes) << ")\n";
  if (opt_built) {
    os << " Optimizer params: " << with_commas(opt_count) << " (" << readable_memory_size(opt_bytes)
       << ")\n";
  }
  out << os.str() << std::flush;
}

}  // namespace lockstep
