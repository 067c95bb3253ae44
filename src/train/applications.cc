// keras.applications as Models: nn builds each network's graph, this file
// wraps it and loads the weights file the user named.
#include "lockstep/train/applications.h"

namespace lockstep::applications {

Model MobileNetV2(const MobileNetV2Options& options) {
  Model model(mobilenet_v2::build(options));
  if (!options.weights.empty()) model.load_weights(options.weights);
  return model;
}

}  // namespace lockstep::applications
