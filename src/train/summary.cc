// Model::summary: Keras 3's print_summary (keras/src/utils/summary_utils.py)
// as rich renders it without colour: a heavy-headed box table whose column
// widths come from Keras's positions, shrunk the way rich shrinks fixed-width
// columns that do not fit (ratio_reduce over the excess).
#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <sstream>

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
    const int distributed = std::min(v, static_cast<int>(round_half_even(static_cast<double>(remaining) / total_ratio)));
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

// rich's divide_line with fold: words are runs of non-space with their
// trailing spaces; a word that does not fit starts a new line, and a word
// wider than the column is chopped into column-wide pieces.
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
    } else if (display_width(trimmed) > width) {
      if (!lines.back().empty()) lines.emplace_back();
      for (std::size_t at = 0; at < word.size(); at += width) {
        if (at) lines.emplace_back();
        lines.back() = word.substr(at, width);
      }
    } else {
      lines.push_back(word);
    }
  }
  for (std::string& line : lines) {
    while (display_width(line) > width && !line.empty() && line.back() == ' ') line.pop_back();
  }
  return lines;
}

struct Row {
  std::vector<std::string> cells;
};

std::string shape_of(const KerasTensor& k) { return k.shape_string(); }

}  // namespace

void Model::summary(std::ostream& out, const SummaryOptions& options) const {
  LOCKSTEP_CHECK(defined(), "summary: the model is undefined");
  std::vector<Row> rows;
  bool sequential_like = true;
  const LayerImpl& net = *impl_;

  if (auto* f = dynamic_cast<const FunctionalImpl*>(&net)) {
    // Chain-shaped graphs (one input, one path, no shared layers) print as
    // Sequential; others get a "Connected to" column.
    std::map<const LayerImpl*, int> calls;
    for (const auto& step : f->steps()) {
      if (++calls[step.node->layer.get()] > 1 || step.node->inputs.size() > 1) sequential_like = false;
    }
    if (f->inputs().size() > 1 || f->outputs().size() > 1) sequential_like = false;
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
    for (const KerasTensor& in : f->inputs()) {
      rows.push_back({{in.node()->input_name + " (InputLayer)", shape_of(in), "0", "-"}});
    }
    std::map<const LayerImpl*, std::size_t> row_of;
    for (const auto& step : f->steps()) {
      const LayerImpl* layer = step.node->layer.get();
      std::string connected;
      for (const KerasTensor& in : step.node->inputs) {
        if (!connected.empty()) connected += ", ";
        connected += source_name(in);
      }
      auto it = row_of.find(layer);
      if (it == row_of.end()) {
        row_of[layer] = rows.size();
        rows.push_back({{layer->name() + " (" + layer->class_name() + ")", shape_of(step.output),
                         with_commas(layer->count_params()), connected}});
      } else {  // a shared layer: Keras shows the last call's shape and every connection
        rows[it->second].cells[1] = shape_of(step.output);
        rows[it->second].cells[3] += ", " + connected;
      }
    }
  } else if (auto* s = dynamic_cast<const SequentialImpl*>(&net)) {
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

  std::vector<double> positions = sequential_like ? std::vector<double>{0.45, 0.80, 1.0}
                                                  : std::vector<double>{0.3, 0.56, 0.74, 1.0};
  std::vector<std::string> header = {"Layer (type)", "Output Shape", "Param #"};
  if (!sequential_like) header.push_back("Connected to");
  for (Row& r : rows) r.cells.resize(header.size());
  int line_length = options.line_length;
  if (line_length <= 0) line_length = std::min(sequential_like ? 88 : 108, terminal_columns() - 4);

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
  os << "Model: \"" << net.name() << "\"\n";
  os << rule("\u250f", "\u2501", "\u2533", "\u2513");
  os << row_line(header, "\u2503");
  os << rule("\u2521", "\u2501", "\u2547", "\u2529");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i) os << rule("\u251c", "\u2500", "\u253c", "\u2524");
    os << row_line(rows[i].cells, "\u2502");
  }
  os << rule("\u2514", "\u2500", "\u2534", "\u2518");

  auto count = [](const std::vector<Variable>& vars) {
    std::int64_t n = 0;
    double bytes = 0;
    for (const Variable& v : vars) {
      n += v.shape().numel();
      bytes += static_cast<double>(v.shape().numel() * static_cast<std::int64_t>(dtype_size(v.dtype())));
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
  os << " Trainable params: " << with_commas(trainable) << " (" << readable_memory_size(trainable_bytes) << ")\n";
  os << " Non-trainable params: " << with_commas(frozen) << " (" << readable_memory_size(frozen_bytes) << ")\n";
  if (opt_built) {
    os << " Optimizer params: " << with_commas(opt_count) << " (" << readable_memory_size(opt_bytes) << ")\n";
  }
  out << os.str() << std::flush;
}

}  // namespace lockstep
