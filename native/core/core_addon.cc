// core.node module init: buffer memory, TSC, eventfd, FdWaiter, the af_packet socket, memif and
// its external payload table, ChainCopy, RxWindows (see native/addons.ts for the TypeScript view of these exports).
#include "common.h"

namespace {

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  rg::InitTsc(env, exports);
  rg::InitMemory(env, exports);
  rg::InitEventfd(env, exports);
  rg::InitFutex(env, exports);
  rg::InitWaiter(env, exports);
  rg::InitAfPacket(env, exports);
  rg::InitMemif(env, exports);
  rg::InitAffinity(env, exports);
  rg::InitExec(env, exports);
  rg::InitVerbsSocket(env, exports);
  rg::InitExtTable(env, exports);
  rg::InitChainCopy(env, exports);
  rg::InitRxWindows(env, exports);
  exports.Set("version", Napi::String::New(env, RDMA_GRAPH_VERSION));
  return exports;
}

}  // namespace

NODE_API_MODULE(core, Init)
