// ibverbs.node: the ibverbs (RAW_PACKET QPs through verbs calls) and mlx5dv (the same queues
// driven in memory) Ethernet drivers, the device list, and the mlx5 format functions' exports.
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>

namespace rg {

void InitFormatExports(Napi::Env env, Napi::Object exports);
void InitDevices(Napi::Env env, Napi::Object exports);
void InitPort(Napi::Env env, Napi::Object exports);

}  // namespace rg
