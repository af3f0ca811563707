// devices(): what ibv_get_device_list finds, for configuration errors, `rdma-graph check` and
// `show hardware`: each device's name, kernel paths, firmware, mlx5 or not, and its ports.
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

#include "verbs.h"

namespace rg {
namespace {

const char* PortStateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_DOWN:
      return "down";
    case IBV_PORT_INIT:
      return "init";
    case IBV_PORT_ARMED:
      return "armed";
    case IBV_PORT_ACTIVE:
      return "active";
    case IBV_PORT_ACTIVE_DEFER:
      return "active-defer";
    default:
      return "nop";
  }
}

const char* LinkLayerName(uint8_t l) {
  switch (l) {
    case IBV_LINK_LAYER_ETHERNET:
      return "ethernet";
    case IBV_LINK_LAYER_INFINIBAND:
      return "infiniband";
    default:
      return "unspecified";
  }
}

// devices() -> { devices: [...], error: string | null }
Napi::Value Devices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object r = Napi::Object::New(env);
  Napi::Array list = Napi::Array::New(env);
  r.Set("devices", list);
  r.Set("error", env.Null());
  int n = 0;
  errno = 0;
  ibv_device** devs = ibv_get_device_list(&n);
  if (devs == nullptr) {
    const int e = errno;
    r.Set("error", std::string(strerror(e)) +
                       (e == ENOSYS ? " (no RDMA subsystem: is the ib_uverbs kernel module loaded?)" : ""));
    return r;
  }
  for (int i = 0; i < n; i++) {
    ibv_device* d = devs[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", ibv_get_device_name(d));
    o.Set("ibdevPath", d->ibdev_path);
    o.Set("guid", Napi::BigInt::New(env, static_cast<uint64_t>(be64toh(ibv_get_device_guid(d)))));
    o.Set("mlx5", mlx5dv_is_supported(d));
    Napi::Array ports = Napi::Array::New(env);
    ibv_context* ctx = ibv_open_device(d);
    if (ctx == nullptr) {
      o.Set("error", std::string("ibv_open_device: ") + strerror(errno));
    } else {
      ibv_device_attr a{};
      if (ibv_query_device(ctx, &a) == 0) {
        o.Set("fwVer", a.fw_ver);
        o.Set("vendorId", a.vendor_id);
        o.Set("vendorPartId", a.vendor_part_id);
        o.Set("hwVer", a.hw_ver);
        for (uint8_t p = 1; p <= a.phys_port_cnt; p++) {
          ibv_port_attr pa{};
          if (ibv_query_port(ctx, p, &pa) != 0) continue;
          Napi::Object po = Napi::Object::New(env);
          po.Set("port", p);
          po.Set("state", PortStateName(pa.state));
          po.Set("linkLayer", LinkLayerName(pa.link_layer));
          po.Set("activeMtu", 128 << pa.active_mtu);
          po.Set("activeSpeed", pa.active_speed);
          po.Set("activeWidth", pa.active_width);
          ports.Set(ports.Length(), po);
        }
      } else {
        o.Set("error", std::string("ibv_query_device: ") + strerror(errno));
      }
      ibv_close_device(ctx);
    }
    o.Set("ports", ports);
    list.Set(list.Length(), o);
  }
  ibv_free_device_list(devs);
  return r;
}

}  // namespace

void InitDevices(Napi::Env env, Napi::Object exports) {
  exports.Set("devices", Napi::Function::New(env, Devices, "devices"));
}

}  // namespace rg
