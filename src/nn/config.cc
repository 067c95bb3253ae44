// LayerConfig values and the registry of loadable layer classes.
#include "lockstep/nn/config.h"

#include <cmath>
#include <map>
#include <mutex>

#include "lockstep/core/error.h"
#include "lockstep/core/nearest_name.h"
#include "lockstep/nn/attention_layers.h"
#include "lockstep/nn/conv_layers.h"
#include "lockstep/nn/image_augmentation.h"
#include "lockstep/nn/layers.h"
#include "lockstep/nn/recurrent_layers.h"
#include "lockstep/nn/reshaping_layers.h"
#include "lockstep/nn/sequence_layers.h"

namespace lockstep {

void LayerConfig::set(const std::string& key, Value value) {
  for (auto& e : entries_) {
    if (e.first == key) {
      e.second = std::move(value);
      return;
    }
  }
  entries_.emplace_back(key, std::move(value));
}

bool LayerConfig::has(const std::string& key) const {
  for (const auto& e : entries_) {
    if (e.first == key) return true;
  }
  return false;
}

template <typename T>
T LayerConfig::get(const std::string& key) const {
  for (const auto& [k, v] : entries_) {
    if (k != key) continue;
    if (const T* p = std::get_if<T>(&v)) return *p;
    if constexpr (std::is_same_v<T, double>) {  // JSON may carry 0.5 as well as 1
      if (const auto* i = std::get_if<std::int64_t>(&v)) return static_cast<double>(*i);
    }
    if constexpr (std::is_same_v<T, std::vector<double>>) {  // [-1, 1] as well as [-0.5, 0.5]
      if (const auto* i = std::get_if<std::vector<std::int64_t>>(&v))
        return T(i->begin(), i->end());
    }
    detail::throw_error<ValueError>("layer config: '", key, "' has another type than expected");
  }
  detail::throw_error<ValueError>("layer config: missing key '", key, "'");
}
template bool LayerConfig::get<bool>(const std::string&) const;
template std::int64_t LayerConfig::get<std::int64_t>(const std::string&) const;
template double LayerConfig::get<double>(const std::string&) const;
template std::string LayerConfig::get<std::string>(const std::string&) const;
template std::vector<std::int64_t> LayerConfig::get<std::vector<std::int64_t>>(
    const std::string&) const;
template std::vector<double> LayerConfig::get<std::vector<double>>(const std::string&) const;

namespace {

using layers::Size2;

Size2 size2(const LayerConfig& c, const std::string& key) {
  const auto v = c.get<std::vector<std::int64_t>>(key);
  LOCKSTEP_CHECK(v.size() == 2, "layer config: '", key, "' must hold 2 numbers, got ", v.size());
  return {v[0], v[1]};
}

Initializer initializer(const LayerConfig& c, const std::string& key, Initializer fallback) {
  if (!c.has(key)) return fallback;
  // Its arguments under "key.argument" (config_helpers.h's put_initializer).
  Initializer::Args args;
  const std::string prefix = key + ".";
  for (const auto& [k, v] : c.entries()) {
    if (k.rfind(prefix, 0) != 0) continue;
    if (const auto* d = std::get_if<double>(&v)) {
      args.emplace_back(k.substr(prefix.size()), *d);
    } else if (const auto* i = std::get_if<std::int64_t>(&v)) {
      args.emplace_back(k.substr(prefix.size()), static_cast<double>(*i));
    } else if (const auto* s = std::get_if<std::string>(&v)) {
      args.emplace_back(k.substr(prefix.size()), *s);
    } else {
      detail::throw_error<ValueError>(key, ": the initializer argument '", k.substr(prefix.size()),
                                      "' is neither a number nor a string");
    }
  }
  return initializers::from_config(c.get<std::string>(key), args);
}

Regularizer regularizer(const LayerConfig& c, const std::string& key) {
  if (!c.has(key + "_l1") && !c.has(key + "_l2")) return {};
  return regularizers::L1L2(static_cast<float>(c.get_or<double>(key + "_l1", 0)),
                            static_cast<float>(c.get_or<double>(key + "_l2", 0)));
}

std::string name(const LayerConfig& c) { return c.get_or<std::string>("name", ""); }

// A number or a list of numbers under `key`, as doubles.
std::vector<double> numbers(const LayerConfig& c, const std::string& key) {
  for (const auto& [k, v] : c.entries()) {
    if (k != key) continue;
    if (const auto* d = std::get_if<double>(&v)) return {*d};
    if (const auto* i = std::get_if<std::int64_t>(&v)) return {static_cast<double>(*i)};
    if (const auto* is = std::get_if<std::vector<std::int64_t>>(&v))
      return std::vector<double>(is->begin(), is->end());
    return c.get<std::vector<double>>(key);
  }
  detail::throw_error<ValueError>("layer config: missing key '", key, "'");
}

// A 1-D size: Keras writes [k] (or a number).
std::int64_t size1(const LayerConfig& c, const std::string& key) {
  const std::vector<double> v = numbers(c, key);
  LOCKSTEP_CHECK(v.size() == 1 && v[0] == std::floor(v[0]), "layer config: ", key,
                 " must be one whole number, got ", v.size(), " values");
  return static_cast<std::int64_t>(v[0]);
}

// A global pooling layer L from its config (keepdims, name).
template <typename L>
Layer global_pooling(const LayerConfig& c) {
  return L({.keepdims = c.get_or("keepdims", false), .name = name(c)});
}

// The arguments Dense, Conv1D and Conv2D share (activation, bias, kernel
// and bias initializers and regularizers, name), set on `o`.
template <typename Options>
Options with_kernel_layer_options(const LayerConfig& c, Options o) {
  o.activation = c.get_or<std::string>("activation", "");
  o.use_bias = c.get_or("use_bias", true);
  o.kernel_initializer = initializer(c, "kernel_initializer", initializers::GlorotUniform());
  o.bias_initializer = initializer(c, "bias_initializer", initializers::Zeros());
  o.kernel_regularizer = regularizer(c, "kernel_regularizer");
  o.bias_regularizer = regularizer(c, "bias_regularizer");
  o.name = name(c);
  return o;
}

std::map<std::string, LayerFactory> builtin_factories() {
  std::map<std::string, LayerFactory> f;
  f["Dense"] = [](const LayerConfig& c) -> Layer {
    return layers::Dense(c.get<std::int64_t>("units"),
                         with_kernel_layer_options(c, layers::DenseOptions{}));
  };
  f["Activation"] = [](const LayerConfig& c) -> Layer {
    return layers::Activation(c.get<std::string>("activation"), name(c));
  };
  f["ReLU"] = [](const LayerConfig& c) -> Layer {
    layers::ReLUOptions o{
        .negative_slope = static_cast<float>(c.get_or<double>("negative_slope", 0)),
        .threshold = static_cast<float>(c.get_or<double>("threshold", 0)),
        .name = name(c)};
    if (c.has("max_value")) o.max_value = static_cast<float>(c.get<double>("max_value"));
    return layers::ReLU(o);
  };
  f["LeakyReLU"] = [](const LayerConfig& c) -> Layer {
    // Keras 2's files name the slope alpha.
    const double slope =
        c.has("negative_slope") ? c.get<double>("negative_slope") : c.get_or<double>("alpha", 0.3);
    return layers::LeakyReLU({.negative_slope = static_cast<float>(slope), .name = name(c)});
  };
  f["ELU"] = [](const LayerConfig& c) -> Layer {
    return layers::ELU(
        {.alpha = static_cast<float>(c.get_or<double>("alpha", 1.0)), .name = name(c)});
  };
  f["PReLU"] = [](const LayerConfig& c) -> Layer {
    layers::PReLUOptions o{
        .alpha_initializer = initializer(c, "alpha_initializer", initializers::Zeros()),
        .alpha_regularizer = regularizer(c, "alpha_regularizer"),
        .name = name(c)};
    if (c.has("shared_axes")) {
      for (double axis : numbers(c, "shared_axes"))
        o.shared_axes.push_back(static_cast<std::int64_t>(axis));
    }
    return layers::PReLU(o);
  };
  f["Softmax"] = [](const LayerConfig& c) -> Layer {
    return layers::Softmax(static_cast<int>(c.get_or<std::int64_t>("axis", -1)), name(c));
  };
  f["Dropout"] = [](const LayerConfig& c) -> Layer {
    layers::DropoutOptions o{.name = name(c)};
    if (c.has("seed")) o.seed = static_cast<std::uint64_t>(c.get<std::int64_t>("seed"));
    return layers::Dropout(static_cast<float>(c.get<double>("rate")), o);
  };
  f["Flatten"] = [](const LayerConfig& c) -> Layer { return layers::Flatten(name(c)); };
  f["Reshape"] = [](const LayerConfig& c) -> Layer {
    return layers::Reshape(c.get<std::vector<std::int64_t>>("target_shape"), name(c));
  };
  f["Add"] = [](const LayerConfig& c) -> Layer { return layers::Add(name(c)); };
  f["Multiply"] = [](const LayerConfig& c) -> Layer { return layers::Multiply(name(c)); };
  f["Subtract"] = [](const LayerConfig& c) -> Layer { return layers::Subtract(name(c)); };
  f["Average"] = [](const LayerConfig& c) -> Layer { return layers::Average(name(c)); };
  f["Maximum"] = [](const LayerConfig& c) -> Layer { return layers::Maximum(name(c)); };
  f["Minimum"] = [](const LayerConfig& c) -> Layer { return layers::Minimum(name(c)); };
  f["Concatenate"] = [](const LayerConfig& c) -> Layer {
    return layers::Concatenate(static_cast<int>(c.get_or<std::int64_t>("axis", -1)), name(c));
  };
  f["Rescaling"] = [](const LayerConfig& c) -> Layer {
    return layers::Rescaling(
        static_cast<float>(c.get<double>("scale")),
        {.offset = static_cast<float>(c.get_or<double>("offset", 0)), .name = name(c)});
  };
  f["Normalization"] = [](const LayerConfig& c) -> Layer {
    // Keras writes the axis as a list ([-1]) or a number; Lockstep
    // normalises over the last axis only.
    const std::vector<double> axis = c.has("axis") ? numbers(c, "axis") : std::vector{-1.0};
    LOCKSTEP_CHECK(axis == std::vector{-1.0}, "Normalization '", name(c),
                   "': Lockstep normalises over the last axis (axis=-1) only");
    LOCKSTEP_CHECK(c.has("mean") == c.has("variance"), "Normalization '", name(c),
                   "': the config has ",
                   c.has("mean") ? "a mean and no variance" : "a variance and no mean",
                   "; give both, or neither (an adapted layer's weights hold them)");
    if (!c.has("mean"))  // Keras's adapted layer: the statistics are its weights
      return layers::Normalization({.invert = c.get_or<bool>("invert", false), .name = name(c)});
    return layers::Normalization({.mean = numbers(c, "mean"),
                                  .variance = numbers(c, "variance"),
                                  .invert = c.get_or<bool>("invert", false),
                                  .name = name(c)});
  };
  f["LayerNormalization"] = [](const LayerConfig& c) -> Layer {
    const std::vector<double> axis = c.has("axis") ? numbers(c, "axis") : std::vector{-1.0};
    LOCKSTEP_CHECK(axis == std::vector{-1.0}, "LayerNormalization '", name(c),
                   "': Lockstep normalises over the last axis (axis=-1) only");
    return layers::LayerNormalization(
        {.epsilon = static_cast<float>(c.get_or<double>("epsilon", 1e-3)),
         .center = c.get_or("center", true),
         .scale = c.get_or("scale", true),
         .rms_scaling = c.get_or("rms_scaling", false),
         .beta_initializer = initializer(c, "beta_initializer", initializers::Zeros()),
         .gamma_initializer = initializer(c, "gamma_initializer", initializers::Ones()),
         .beta_regularizer = regularizer(c, "beta_regularizer"),
         .gamma_regularizer = regularizer(c, "gamma_regularizer"),
         .name = name(c)});
  };
  f["Conv1D"] = [](const LayerConfig& c) -> Layer {
    return layers::Conv1D(
        c.get<std::int64_t>("filters"), size1(c, "kernel_size"),
        with_kernel_layer_options(
            c, layers::Conv1DOptions{.strides = size1(c, "strides"),
                                     .padding = c.get_or<std::string>("padding", "valid"),
                                     .dilation_rate = size1(c, "dilation_rate"),
                                     .groups = c.get_or<std::int64_t>("groups", 1)}));
  };
  auto pooling1d = [](bool max) {
    return [max](const LayerConfig& c) -> Layer {
      const std::int64_t pool = size1(c, "pool_size");
      const layers::Pooling1DOptions o{.strides = c.has("strides") ? size1(c, "strides") : pool,
                                       .padding = c.get_or<std::string>("padding", "valid"),
                                       .name = name(c)};
      if (max) return layers::MaxPooling1D(pool, o);
      return layers::AveragePooling1D(pool, o);
    };
  };
  f["MaxPooling1D"] = pooling1d(true);
  f["AveragePooling1D"] = pooling1d(false);
  f["GlobalAveragePooling1D"] = global_pooling<layers::GlobalAveragePooling1D>;
  f["GlobalMaxPooling1D"] = global_pooling<layers::GlobalMaxPooling1D>;
  auto recurrent = [](const char* cls) {
    return [cls = std::string(cls)](const LayerConfig& c) -> Layer {
      layers::RecurrentLayerOptions o{
          .activation = c.get_or<std::string>("activation", "tanh"),
          .recurrent_activation = c.get_or<std::string>("recurrent_activation", "sigmoid"),
          .use_bias = c.get_or("use_bias", true),
          .kernel_initializer = initializer(c, "kernel_initializer", initializers::GlorotUniform()),
          .recurrent_initializer =
              initializer(c, "recurrent_initializer", initializers::Orthogonal()),
          .bias_initializer = initializer(c, "bias_initializer", initializers::Zeros()),
          .unit_forget_bias = c.get_or("unit_forget_bias", true),
          .kernel_regularizer = regularizer(c, "kernel_regularizer"),
          .recurrent_regularizer = regularizer(c, "recurrent_regularizer"),
          .bias_regularizer = regularizer(c, "bias_regularizer"),
          .dropout = static_cast<float>(c.get_or<double>("dropout", 0)),
          .recurrent_dropout = static_cast<float>(c.get_or<double>("recurrent_dropout", 0)),
          .return_sequences = c.get_or("return_sequences", false),
          .return_state = c.get_or("return_state", false),
          .go_backwards = c.get_or("go_backwards", false),
          .reset_after = c.get_or("reset_after", true),
          .unroll = c.get_or("unroll", false),
          .zero_output_for_mask = c.get_or("zero_output_for_mask", false),
          .stateful = c.get_or("stateful", false),
          .name = name(c)};
      if (c.has("seed")) o.seed = static_cast<std::uint64_t>(c.get<std::int64_t>("seed"));
      const std::int64_t units = c.get<std::int64_t>("units");
      if (cls == "LSTM") return layers::LSTM(units, o);
      if (cls == "GRU") return layers::GRU(units, o);
      return layers::SimpleRNN(units, o);
    };
  };
  f["EinsumDense"] = [](const LayerConfig& c) -> Layer {
    return layers::EinsumDense(
        c.get<std::string>("equation"), c.get<std::vector<std::int64_t>>("output_shape"),
        {.bias_axes = c.get_or<std::string>("bias_axes", ""),
         .activation = c.get_or<std::string>("activation", ""),
         .kernel_initializer = initializer(c, "kernel_initializer", initializers::GlorotUniform()),
         .bias_initializer = initializer(c, "bias_initializer", initializers::Zeros()),
         .kernel_regularizer = regularizer(c, "kernel_regularizer"),
         .bias_regularizer = regularizer(c, "bias_regularizer"),
         .name = name(c)});
  };
  f["MultiHeadAttention"] = [](const LayerConfig& c) -> Layer {
    std::vector<std::int64_t> axes;
    if (c.has("attention_axes")) {
      for (double a : numbers(c, "attention_axes")) axes.push_back(static_cast<std::int64_t>(a));
    }
    layers::MultiHeadAttentionOptions o{
        .value_dim = c.get_or<std::int64_t>("value_dim", 0),
        .dropout = static_cast<float>(c.get_or<double>("dropout", 0)),
        .use_bias = c.get_or("use_bias", true),
        .output_dim = c.has("output_shape") ? size1(c, "output_shape") : 0,
        .kernel_initializer = initializer(c, "kernel_initializer", initializers::GlorotUniform()),
        .bias_initializer = initializer(c, "bias_initializer", initializers::Zeros()),
        .kernel_regularizer = regularizer(c, "kernel_regularizer"),
        .bias_regularizer = regularizer(c, "bias_regularizer"),
        .attention_axes = axes,
        .name = name(c)};
    if (c.has("seed")) o.seed = static_cast<std::uint64_t>(c.get<std::int64_t>("seed"));
    return layers::MultiHeadAttention(c.get<std::int64_t>("num_heads"),
                                      c.get<std::int64_t>("key_dim"), o);
  };
  f["Permute"] = [](const LayerConfig& c) -> Layer {
    return layers::Permute(c.get<std::vector<std::int64_t>>("dims"), name(c));
  };
  f["RepeatVector"] = [](const LayerConfig& c) -> Layer {
    return layers::RepeatVector(c.get<std::int64_t>("n"), name(c));
  };
  f["Cropping2D"] = [](const LayerConfig& c) -> Layer {
    const auto p = c.get<std::vector<std::int64_t>>("cropping");
    LOCKSTEP_CHECK(p.size() == 4, "layer config: Cropping2D cropping must hold 4 numbers");
    return layers::Cropping2D({{{p[0], p[1]}, {p[2], p[3]}}}, name(c));
  };
  f["UpSampling2D"] = [](const LayerConfig& c) -> Layer {
    return layers::UpSampling2D(
        size2(c, "size"),
        {.interpolation = c.get_or<std::string>("interpolation", "nearest"), .name = name(c)});
  };
  f["Dot"] = [](const LayerConfig& c) -> Layer {
    const std::vector<double> axes = numbers(c, "axes");
    LOCKSTEP_CHECK(axes.size() == 1 || axes.size() == 2,
                   "layer config: Dot axes must be one number or two, got ", axes.size());
    const layers::DotOptions o{.normalize = c.get_or("normalize", false), .name = name(c)};
    if (axes.size() == 1) return layers::Dot(static_cast<int>(axes[0]), o);
    return layers::Dot(std::array<int, 2>{static_cast<int>(axes[0]), static_cast<int>(axes[1])}, o);
  };
  f["SimpleRNN"] = recurrent("SimpleRNN");
  f["LSTM"] = recurrent("LSTM");
  f["GRU"] = recurrent("GRU");
  f["Embedding"] = [](const LayerConfig& c) -> Layer {
    return layers::Embedding(c.get<std::int64_t>("input_dim"), c.get<std::int64_t>("output_dim"),
                             {.embeddings_regularizer = regularizer(c, "embeddings_regularizer"),
                              .mask_zero = c.get_or("mask_zero", false),
                              .name = name(c)});
  };
  f["Masking"] = [](const LayerConfig& c) -> Layer {
    return layers::Masking(c.get_or<double>("mask_value", 0.0), name(c));
  };
  f["Attention"] = [](const LayerConfig& c) -> Layer {
    layers::AttentionOptions o{.use_scale = c.get_or("use_scale", false),
                               .score_mode = c.get_or<std::string>("score_mode", "dot"),
                               .dropout = static_cast<float>(c.get_or<double>("dropout", 0)),
                               .name = name(c)};
    if (c.has("seed")) o.seed = static_cast<std::uint64_t>(c.get<std::int64_t>("seed"));
    return layers::Attention(o);
  };
  f["Conv2D"] = [](const LayerConfig& c) -> Layer {
    return layers::Conv2D(
        c.get<std::int64_t>("filters"), size2(c, "kernel_size"),
        with_kernel_layer_options(
            c, layers::Conv2DOptions{.strides = size2(c, "strides"),
                                     .padding = c.get<std::string>("padding"),
                                     .dilation_rate = size2(c, "dilation_rate"),
                                     .groups = c.get_or<std::int64_t>("groups", 1)}));
  };
  f["Conv2DTranspose"] = [](const LayerConfig& c) -> Layer {
    return layers::Conv2DTranspose(
        c.get<std::int64_t>("filters"), size2(c, "kernel_size"),
        with_kernel_layer_options(
            c, layers::Conv2DOptions{.strides = size2(c, "strides"),
                                     .padding = c.get<std::string>("padding"),
                                     .dilation_rate = size2(c, "dilation_rate")}));
  };
  f["DepthwiseConv2D"] = [](const LayerConfig& c) -> Layer {
    return layers::DepthwiseConv2D(
        size2(c, "kernel_size"), {.strides = size2(c, "strides"),
                                  .padding = c.get<std::string>("padding"),
                                  .depth_multiplier = c.get_or<std::int64_t>("depth_multiplier", 1),
                                  .dilation_rate = size2(c, "dilation_rate"),
                                  .activation = c.get_or<std::string>("activation", ""),
                                  .use_bias = c.get_or("use_bias", true),
                                  .depthwise_regularizer = regularizer(c, "depthwise_regularizer"),
                                  .bias_regularizer = regularizer(c, "bias_regularizer"),
                                  .name = name(c)});
  };
  f["SeparableConv2D"] = [](const LayerConfig& c) -> Layer {
    return layers::SeparableConv2D(
        c.get<std::int64_t>("filters"), size2(c, "kernel_size"),
        {.strides = size2(c, "strides"),
         .padding = c.get<std::string>("padding"),
         .depth_multiplier = c.get_or<std::int64_t>("depth_multiplier", 1),
         .dilation_rate = size2(c, "dilation_rate"),
         .activation = c.get_or<std::string>("activation", ""),
         .use_bias = c.get_or("use_bias", true),
         .depthwise_initializer =
             initializer(c, "depthwise_initializer", initializers::GlorotUniform()),
         .pointwise_initializer =
             initializer(c, "pointwise_initializer", initializers::GlorotUniform()),
         .bias_initializer = initializer(c, "bias_initializer", initializers::Zeros()),
         .depthwise_regularizer = regularizer(c, "depthwise_regularizer"),
         .pointwise_regularizer = regularizer(c, "pointwise_regularizer"),
         .bias_regularizer = regularizer(c, "bias_regularizer"),
         .name = name(c)});
  };
  auto pooling = [](bool max) {
    return [max](const LayerConfig& c) -> Layer {
      const layers::Pooling2DOptions o{.strides = size2(c, "strides"),
                                       .padding = c.get<std::string>("padding"),
                                       .name = name(c)};
      if (max) return layers::MaxPooling2D(size2(c, "pool_size"), o);
      return layers::AveragePooling2D(size2(c, "pool_size"), o);
    };
  };
  f["MaxPooling2D"] = pooling(true);
  f["AveragePooling2D"] = pooling(false);
  f["GlobalAveragePooling2D"] = global_pooling<layers::GlobalAveragePooling2D>;
  f["GlobalMaxPooling2D"] = global_pooling<layers::GlobalMaxPooling2D>;
  f["Resizing"] = [](const LayerConfig& c) -> Layer {
    return layers::Resizing(c.get<std::int64_t>("height"), c.get<std::int64_t>("width"),
                            {.interpolation = c.get_or<std::string>("interpolation", "bilinear"),
                             .crop_to_aspect_ratio = c.get_or("crop_to_aspect_ratio", false),
                             .pad_to_aspect_ratio = c.get_or("pad_to_aspect_ratio", false),
                             .fill_mode = c.get_or<std::string>("fill_mode", "constant"),
                             .fill_value = static_cast<float>(c.get_or<double>("fill_value", 0)),
                             .antialias = c.get_or("antialias", false),
                             .name = name(c)});
  };
  f["ZeroPadding2D"] = [](const LayerConfig& c) -> Layer {
    const auto p = c.get<std::vector<std::int64_t>>("padding");
    LOCKSTEP_CHECK(p.size() == 4, "layer config: ZeroPadding2D padding must hold 4 numbers");
    return layers::ZeroPadding2D({{{p[0], p[1]}, {p[2], p[3]}}}, name(c));
  };
  f["BatchNormalization"] = [](const LayerConfig& c) -> Layer {
    return layers::BatchNormalization({.momentum = static_cast<float>(c.get<double>("momentum")),
                                       .epsilon = static_cast<float>(c.get<double>("epsilon")),
                                       .center = c.get_or("center", true),
                                       .scale = c.get_or("scale", true),
                                       .name = name(c)});
  };
  f["RandomFlip"] = [](const LayerConfig& c) -> Layer {
    layers::RandomFlipOptions o{.name = name(c)};
    if (c.has("seed")) o.seed = static_cast<std::uint64_t>(c.get<std::int64_t>("seed"));
    return layers::RandomFlip(c.get_or<std::string>("mode", "horizontal_and_vertical"), o);
  };
  f["RandomRotation"] = [](const LayerConfig& c) -> Layer {
    layers::RandomRotationOptions o{
        .fill_mode = c.get_or<std::string>("fill_mode", "reflect"),
        .interpolation = c.get_or<std::string>("interpolation", "bilinear"),
        .fill_value = static_cast<float>(c.get_or<double>("fill_value", 0.0)),
        .name = name(c)};
    if (c.has("seed")) o.seed = static_cast<std::uint64_t>(c.get<std::int64_t>("seed"));
    // Keras saves the (lower, upper) pair; one number is taken as its constructor takes it.
    const std::vector<double> v = numbers(c, "factor");
    LOCKSTEP_CHECK(v.size() == 1 || v.size() == 2,
                   "layer config: RandomRotation factor must be a number or 2 numbers, got ",
                   v.size());
    if (v.size() == 1) return layers::RandomRotation(v[0], o);
    return layers::RandomRotation(std::array<double, 2>{v[0], v[1]}, o);
  };
  return f;
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, LayerFactory> factories = builtin_factories();
  std::map<std::string, LayerFactory> lambdas;  // by layer name
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

bool is_builtin_layer_class(const std::string& class_name) {
  static const std::map<std::string, LayerFactory> builtin = builtin_factories();
  // Bidirectional and TimeDistributed are built from their entries by
  // keras_config (their layer is an entry of its own, not a setting).
  return class_name == "InputLayer" || class_name == "Bidirectional" ||
         class_name == "TimeDistributed" || builtin.contains(class_name);
}

bool is_known_layer_class(const std::string& class_name) {
  if (is_builtin_layer_class(class_name)) return true;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.factories.contains(class_name);
}

void register_layer(const std::string& class_name, LayerFactory factory) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.factories[class_name] = std::move(factory);
}

void register_lambda(const std::string& layer_name, LayerFactory factory) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.lambdas[layer_name] = std::move(factory);
}

LayerFactory lambda_factory(const std::string& layer_name) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.lambdas.find(layer_name);
  return it == r.lambdas.end() ? LayerFactory() : it->second;
}

Layer layer_from_config(const std::string& class_name, const LayerConfig& config) {
  LayerFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = r.factories.find(class_name);
    if (it == r.factories.end()) {
      std::string known;
      std::vector<std::string> names;
      for (const auto& [k, v] : r.factories) {
        known += (known.empty() ? "" : ", ") + k;
        names.push_back(k);
      }
      detail::throw_error<ValueError>(
          "unknown layer class '", class_name, "' (did you mean '", nearest_name(class_name, names),
          "'?); known classes: ", known,
          ". Hint: register custom layers with lockstep::register_layer");
    }
    factory = it->second;
  }
  Layer layer = factory(config);
  layer.set_trainable(config.get_or("trainable", true));
  return layer;
}

}  // namespace lockstep
