// Fine-tuning MobileNetV2 across replicas, offline: the seed report's recipe
// (issue #19) on an image folder made from Fashion-MNIST.
//
//   1. An image folder: the first --images training images of Fashion-MNIST
//      as 96 x 96 RGB JPEGs in footwear/ and other/ (reused when present).
//   2. A MobileNetV2 base (alpha 0.35, 96 x 96, weights none) pretrained on
//      the other task — the ten classes, on the test split's images, which
//      the fine-tuning never sees — and saved as .keras (skipped when the
//      file exists). Its BatchNormalization momentum is 0.9 while it
//      pretrains (set_batch_norm_momentum says why); fine-tuning uses
//      Keras's 0.999.
//   3. The report's fine-tuning: the base loaded from that file, the head
//      GlobalAveragePooling2D -> Dense(512, relu) -> Dropout(0.5) -> Dense(1),
//      BinaryCrossentropy(from_logits), the ramp-up schedule through
//      LearningRateScheduler, batch per replica x num_replicas_in_sync under
//      MirroredStrategy, image_dataset_from_directory with a validation
//      split, shuffle(1024).repeat().batch().prefetch(AUTOTUNE),
//      steps_per_epoch and validation_steps — once with the base frozen,
//      once with it trainable.
//
//   fine_tune_mobilenet [--dir DIR] [--images N] [--pretrain-images N]
//                       [--pretrain-epochs E] [--pretrain-steps S] [--epochs E]
//                       [--steps-per-epoch S] [--validation-steps V]
//                       [--batch-per-replica B] [--variant frozen|unfrozen|both]
//                       [--no-prefetch]
//
// --no-prefetch leaves out the prefetch after batch (the one inside
// image_dataset_from_directory stays, as in Keras). The defaults are the run
// docs/models.md reports (about 7 minutes on 2 cores); the test suite runs a
// shortened form (tiny counts; examples/CMakeLists.txt).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/lockstep.h"

namespace ls = lockstep;
namespace fs = std::filesystem;

struct Flags {
  std::string dir = "fine_tune_mobilenet_work";
  std::int64_t images = 4000;           // training images written to the folder
  std::int64_t pretrain_images = 6000;  // test-split images for the ten-class task
  int pretrain_epochs = 3;
  std::int64_t pretrain_steps = 0;  // per epoch; 0: one pass over the images
  int epochs = 6;
  std::int64_t steps_per_epoch = 0;   // 0: the report's count // global batch
  std::int64_t validation_steps = 0;  // 0: the report's count // global batch
  std::int64_t batch_per_replica = 32;
  std::string variant = "both";  // frozen, unfrozen or both
  bool prefetch = true;
};

bool parse_flags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--no-prefetch") {
      f.prefetch = false;
      continue;
    }
    if (i + 1 >= argc) return false;
    const std::string value = argv[++i];
    if (flag == "--dir")
      f.dir = value;
    else if (flag == "--images")
      f.images = std::stoll(value);
    else if (flag == "--pretrain-images")
      f.pretrain_images = std::stoll(value);
    else if (flag == "--pretrain-epochs")
      f.pretrain_epochs = std::stoi(value);
    else if (flag == "--pretrain-steps")
      f.pretrain_steps = std::stoll(value);
    else if (flag == "--epochs")
      f.epochs = std::stoi(value);
    else if (flag == "--steps-per-epoch")
      f.steps_per_epoch = std::stoll(value);
    else if (flag == "--validation-steps")
      f.validation_steps = std::stoll(value);
    else if (flag == "--batch-per-replica")
      f.batch_per_replica = std::stoll(value);
    else if (flag == "--variant" && (value == "frozen" || value == "unfrozen" || value == "both"))
      f.variant = value;
    else
      return false;
  }
  return true;
}

// False on an unknown flag, a missing value or a number that does not parse.
bool parse(int argc, char** argv, Flags& f) {
  try {
    return parse_flags(argc, argv, f);
  } catch (const std::exception&) {  // std::stoll's
    return false;
  }
}

constexpr std::int64_t kSize = 96;  // IMAGE_SIZE = [96, 96]

ls::applications::MobileNetV2Options base_options(const std::string& weights) {
  return {.input_shape = ls::Shape{kSize, kSize, 3},
          .alpha = 0.35,
          .include_top = false,
          .weights = weights};
}

// A batch of 28 x 28 grey Fashion-MNIST images as MobileNetV2 takes them:
// resized to 96 x 96 (tf.image.resize), grey to RGB
// (tf.image.grayscale_to_rgb) and scaled to [-1, 1] (preprocess_input).
ls::data::Element to_mobilenet_input(const ls::data::Element& e) {
  const ls::Tensor& images = e[0];
  ls::Tensor x = ls::image::resize(ls::reshape(images, {images.dim(0), 28, 28, 1}), {kSize, kSize});
  x = ls::broadcast_to(x, ls::Shape{images.dim(0), kSize, kSize, 3});
  return {ls::applications::mobilenet_v2::preprocess_input(x), e[1]};
}

// Keras's `for layer in base.layers: layer.momentum = 0.9` over the
// BatchNormalization layers. MobileNetV2 uses 0.999, which keeps 80% of the
// initial moving statistics (mean 0, variance 1) after the 225 steps
// pretraining takes here: the base is then useless in inference mode
// (val_accuracy 0.09, chance, when this example pretrained with it) —
// frozen, or when validating. With 0.9 the moving statistics follow the
// last few dozen batches.
void set_batch_norm_momentum(const ls::Model& model, float momentum) {
  for (const ls::Layer& layer : model.layers()) {
    if (auto* bn = dynamic_cast<ls::layers::BatchNormalizationImpl*>(layer.impl().get()))
      bn->set_momentum(momentum);
  }
}

// Step 2: the base, trained with a ten-class head on the test split's
// images (the last fifth held out for validation), then saved on its own.
void pretrain_base(const Flags& f, ls::distribute::Strategy& strategy, const std::string& path) {
  std::printf("Pretraining the MobileNetV2 base on the ten classes (%lld test-split images)\n",
              static_cast<long long>(f.pretrain_images));
  auto [train, test] = ls::datasets::fashion_mnist::load_data();
  const std::int64_t n = std::min<std::int64_t>(f.pretrain_images, test.first.dim(0));
  const std::int64_t n_val = std::max<std::int64_t>(1, n / 5);
  const std::int64_t batch = f.batch_per_replica * strategy.num_replicas_in_sync();
  using ls::data::Dataset;
  const Dataset train_ds = Dataset::from_tensor_slices({test.first.view_rows(0, n - n_val),
                                                        test.second.view_rows(0, n - n_val)})
                               .shuffle(1024, {.seed = 7})
                               .repeat()
                               .batch(batch)
                               .map(to_mobilenet_input, {.num_parallel_calls = ls::data::kAutotune})
                               .prefetch(ls::data::kAutotune);
  const Dataset val_ds = Dataset::from_tensor_slices({test.first.view_rows(n - n_val, n),
                                                      test.second.view_rows(n - n_val, n)})
                             .batch(batch)
                             .map(to_mobilenet_input);
  ls::Model base, model;
  {
    auto scope = strategy.scope();
    base = ls::applications::MobileNetV2(base_options(""));
    set_batch_norm_momentum(base, 0.9f);
    auto inputs = ls::Input({kSize, kSize, 3});
    auto x = ls::layers::GlobalAveragePooling2D()(base(inputs));
    model = ls::Model(inputs, ls::layers::Dense(10)(x));
    model.compile({.optimizer = ls::optimizers::Adam(),
                   .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                   .metrics = {"accuracy"}});
  }
  const std::int64_t steps =
      f.pretrain_steps > 0 ? f.pretrain_steps : std::max<std::int64_t>(1, (n - n_val) / batch);
  model.fit(train_ds, {.epochs = f.pretrain_epochs,
                       .verbose = 2,
                       .validation_data = val_ds,
                       .steps_per_epoch = steps});
  base.save(path);
  std::printf("Saved the pretrained base to %s\n", path.c_str());
}

// The report's ramp-up: a linear ramp from start_lr to max_lr over
// rampup_epochs, max_lr held for sustain_epochs, then exponential decay to
// min_lr; max_lr scales with the replicas, as the report has it.
ls::LearningRateSchedule lrfn(int num_replicas_in_sync) {
  return ls::schedules::RampUp({.start = 0.00001,
                                .max = 0.00005 * num_replicas_in_sync,
                                .min = 0.00001,
                                .rampup = 5,
                                .sustain = 0,
                                .decay = 0.8});
}

// Step 3, one variant: returns the last epoch's val_accuracy.
double fine_tune(const Flags& f, ls::distribute::Strategy& strategy, const std::string& folder,
                 const std::string& base_path, bool trainable_base) {
  std::printf("\n=== Fine-tuning with the base %s ===\n", trainable_base ? "unfrozen" : "frozen");
  const std::int64_t batch_size = f.batch_per_replica * strategy.num_replicas_in_sync();

  // batch_size = None: single images, batched below as the report batches.
  const ls::data::ImageDatasetOptions options{.label_mode = "binary",
                                              .batch_size = std::nullopt,
                                              .image_size = {kSize, kSize},
                                              .seed = 123,
                                              .validation_split = 0.2};
  auto with_subset = [&](const char* subset) {
    ls::data::ImageDatasetOptions o = options;
    o.subset = subset;
    return ls::data::image_dataset_from_directory(folder, o);
  };
  const ls::data::ImageDataset train = with_subset("training");
  const ls::data::ImageDataset val = with_subset("validation");
  auto preprocess = [](const ls::data::Element& e) -> ls::data::Element {
    return {ls::applications::mobilenet_v2::preprocess_input(e[0]), e[1]};
  };
  ls::data::Dataset training_dataset =
      train.shuffle(1024).repeat().batch(batch_size).map(preprocess);
  // Repeated: fit's validation takes validation_steps batches each epoch
  // from one iterator that continues across epochs, as Keras's does.
  ls::data::Dataset validation_dataset = val.repeat().batch(batch_size).map(preprocess);
  if (f.prefetch) {
    training_dataset = training_dataset.prefetch(ls::data::kAutotune);
    validation_dataset = validation_dataset.prefetch(ls::data::kAutotune);
  }
  std::printf("Training input: shuffle(1024).repeat().batch(%lld)%s\n",
              static_cast<long long>(batch_size), f.prefetch ? ".prefetch(AUTOTUNE)" : "");
  const auto n_train = static_cast<std::int64_t>(train.file_paths().size());
  const auto n_val = static_cast<std::int64_t>(val.file_paths().size());
  const std::int64_t steps_per_epoch =
      f.steps_per_epoch > 0 ? f.steps_per_epoch : std::max<std::int64_t>(1, n_train / batch_size);
  const std::int64_t validation_steps =
      f.validation_steps > 0 ? f.validation_steps : std::max<std::int64_t>(1, n_val / batch_size);

  ls::Model model;
  {
    auto scope = strategy.scope();
    ls::Model pretrained_model = ls::applications::MobileNetV2(base_options(base_path));
    pretrained_model.set_trainable(trainable_base);
    model = ls::Sequential({pretrained_model, ls::layers::GlobalAveragePooling2D(),
                            ls::layers::Dense(512, {.activation = "relu"}),
                            ls::layers::Dropout(0.5), ls::layers::Dense(1)},
                           {.input_shape = ls::Shape{kSize, kSize, 3}});
    model.compile(
        {.optimizer = ls::optimizers::Adam(),
         .loss = ls::losses::BinaryCrossentropy({.from_logits = true}),
         // From logits, the class boundary is 0 (Keras's "accuracy" would
         // threshold the logits at 0.5).
         .metrics = {ls::metrics::BinaryAccuracy({.threshold = 0.0f, .name = "accuracy"})}});
  }
  model.summary();

  const ls::LearningRateSchedule schedule = lrfn(strategy.num_replicas_in_sync());
  auto lr_callback = std::make_shared<ls::LearningRateScheduler>(
      [schedule](int epoch, double) { return schedule(epoch); }, /*verbose=*/1);
  const ls::History history = model.fit(training_dataset, {.epochs = f.epochs,
                                                           .verbose = 2,
                                                           .callbacks = {lr_callback},
                                                           .validation_data = validation_dataset,
                                                           .steps_per_epoch = steps_per_epoch,
                                                           .validation_steps = validation_steps});
  const double val_accuracy = history["val_accuracy"].back();
  std::printf("Base %s: val_accuracy %.4f after %d epochs of %lld steps (%lld images per step)\n",
              trainable_base ? "unfrozen" : "frozen", val_accuracy, f.epochs,
              static_cast<long long>(steps_per_epoch), static_cast<long long>(batch_size));
  return val_accuracy;
}

int main(int argc, char** argv) {
  Flags f;
  if (!parse(argc, argv, f)) {
    std::fprintf(stderr,
                 "usage: %s [--dir DIR] [--images N] [--pretrain-images N] [--pretrain-epochs E] "
                 "[--pretrain-steps S] [--epochs E] [--steps-per-epoch S] [--validation-steps V] "
                 "[--batch-per-replica B] [--variant frozen|unfrozen|both] [--no-prefetch]\n",
                 argv[0]);
    return 2;
  }
  try {
    ls::distribute::MirroredStrategy strategy;
    std::printf("Number of replicas: %d\n", strategy.num_replicas_in_sync());

    // Step 1: the image folder, named after what it holds.
    const std::string folder =
        (fs::path(f.dir) / ("fashion_" + std::to_string(kSize) + "_" + std::to_string(f.images)))
            .string();
    if (fs::is_directory(fs::path(folder) / "footwear") &&
        fs::is_directory(fs::path(folder) / "other")) {
      std::printf("Reusing the image folder %s\n", folder.c_str());
    } else {
      const auto counts = ls::datasets::fashion_mnist::write_image_folder(
          folder, {.split = "train", .image_size = kSize, .count = f.images});
      std::printf("Wrote %lld footwear and %lld other images to %s\n",
                  static_cast<long long>(counts.footwear), static_cast<long long>(counts.other),
                  folder.c_str());
    }

    // Step 2: the pretrained base.
    const std::string base_path =
        (fs::path(f.dir) / "mobilenet_v2_0.35_96_fashion10.keras").string();
    if (fs::exists(base_path)) {
      std::printf("Reusing the pretrained base %s\n", base_path.c_str());
    } else {
      pretrain_base(f, strategy, base_path);
    }

    // Step 3: fine-tuning, base frozen then unfrozen.
    std::vector<std::pair<std::string, double>> results;
    if (f.variant != "unfrozen")
      results.emplace_back("frozen", fine_tune(f, strategy, folder, base_path, false));
    if (f.variant != "frozen")
      results.emplace_back("unfrozen", fine_tune(f, strategy, folder, base_path, true));
    std::printf("\n");
    for (const auto& [variant, accuracy] : results)
      std::printf("%s base: val_accuracy %.4f\n", variant.c_str(), accuracy);
  } catch (const ls::Error& e) {
    std::fprintf(stderr, "fine_tune_mobilenet: %s\n", e.what());
    return 1;
  }
  return 0;
}
