// Device: where a tensor's storage lives. cpu, cuda:N, or meta (shape and dtype only,
// no storage: every op runs on meta without arithmetic, which powers memory prediction).
#pragma once
#include <string>

namespace kiln {

enum class DeviceType : uint8_t { cpu, cuda, meta };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  Device() = default;
  Device(DeviceType t, int i = 0) : type(t), index(i) {}
  static Device cpu() { return Device(DeviceType::cpu); }
  static Device cuda(int i = 0) { return Device(DeviceType::cuda, i); }
  static Device meta() { return Device(DeviceType::meta); }

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool is_meta() const { return type == DeviceType::meta; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }

  std::string str() const;
  // "cpu", "meta", "cuda", "cuda:1"; throws kiln::Error naming the text otherwise.
  static Device parse(const std::string& s);
};

}  // namespace kiln
