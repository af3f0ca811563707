// ibverbs.node: ibverbs and mlx5dv Ethernet drivers (port.cc), the device list (devices.cc) and
// the mlx5 format functions for tests (format_exports.cc). Built only when libibverbs and
// libmlx5 are found (native/CMakeLists.txt).
#include "verbs.h"

static Napi::Object InitVerbs(Napi::Env env, Napi::Object exports) {
  rg::InitFormatExports(env, exports);
  rg::InitDevices(env, exports);
  rg::InitPort(env, exports);
  return exports;
}

NODE_API_MODULE(ibverbs, InitVerbs)
