// hub_pull in a build without libcurl or libcrypto.
#include "core/error.h"
#include "io/hub.h"

namespace hibana {

HubPullResult hub_pull(const HubPullOptions&) {
  throw Error(ErrorKind::unsupported,
              "this hibana was built without libcurl or libcrypto, so it cannot download models: "
              "install libcurl4-openssl-dev and libssl-dev and build again, or fetch the model "
              "with `hf download`");
}

}  // namespace hibana
