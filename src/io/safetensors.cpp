#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hibana {

using json = nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit

[[noreturn]] void corrupt(const std::string& what, const std::string& problem) {
  throw Error(ErrorKind::corrupt_data, what + ": " + problem);
}

std::string dtype_to_safetensors(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::f8_e4m3: return "F8_E4M3";
    case DType::f64: return "F64";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::i16: return "I16";
    case DType::i8: return "I8";
    case DType::u8: return "U8";
    case DType::boolean: return "BOOL";
  }
  return "?";
}

}  // namespace

std::map<std::string, TensorInfo> parse_safetensors(const uint8_t* data, size_t size,
                                                    const std::string& what,
                                                    std::map<std::string, std::string>* metadata) {
  if (size < 8) corrupt(what, "file is truncated (" + std::to_string(size) + " bytes, no header)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  if (header_len > kMaxHeaderBytes) {
    corrupt(what, "header length " + std::to_string(header_len) + " is implausible");
  }
  if (header_len > size - 8) {
    corrupt(what, "file is truncated: header needs " + std::to_string(header_len) +
                      " bytes but only " + std::to_string(size - 8) + " follow");
  }
  const char* hbegin = reinterpret_cast<const char*>(data + 8);
  json header;
  try {
    header = json::parse(hbegin, hbegin + header_len);
  } catch (const json::exception& e) {
    corrupt(what, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) corrupt(what, "header is not a JSON object");

  const size_t data_start = 8 + header_len;
  const size_t data_size = size - data_start;
  std::map<std::string, TensorInfo> tensors;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) corrupt(what, "__metadata__ is not an object");
      if (metadata) {
        for (auto m = entry.begin(); m != entry.end(); ++m) {
          if (m.value().is_string()) (*metadata)[m.key()] = m.value().get<std::string>();
        }
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object()) corrupt(what, where + " has no description object");
    auto dt = entry.find("dtype");
    auto sh = entry.find("shape");
    auto off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string()) corrupt(what, where + " has no dtype");
    if (sh == entry.end() || !sh->is_array()) corrupt(what, where + " has no shape");
    if (off == entry.end() || !off->is_array() || off->size() != 2) {
      corrupt(what, where + " has no data_offsets pair");
    }
    TensorInfo info;
    info.name = name;
    auto dtype = dtype_from_safetensors(dt->get<std::string>());
    if (!dtype) {
      throw Error(ErrorKind::unsupported,
                  what + ": " + where + " has unknown dtype '" + dt->get<std::string>() + "'");
    }
    info.dtype = *dtype;
    unsigned __int128 numel = 1;
    if (sh->size() > kMaxDims) corrupt(what, where + " has more than 4 dimensions");
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) corrupt(what, where + " has a shape entry that is not a size");
      uint64_t v = d.get<uint64_t>();
      numel *= v;
      // Each dimension too: after a 0 the product stays 0, and a dimension past int64 would
      // come out negative.
      if (v > (uint64_t{1} << 62) || numel > (static_cast<unsigned __int128>(1) << 62)) {
        corrupt(what, where + " has an impossibly large shape");
      }
      info.shape.push_back(static_cast<int64_t>(v));
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
      corrupt(what, where + " has data_offsets that are not sizes");
    }
    uint64_t begin = (*off)[0].get<uint64_t>();
    uint64_t end = (*off)[1].get<uint64_t>();
    if (begin > end) corrupt(what, where + " has data_offsets that run backwards");
    if (end > data_size) {
      corrupt(what, where + " ends at byte " + std::to_string(end) + " of the data but the data has " +
                        std::to_string(data_size) + " bytes (truncated or lying header)");
    }
    unsigned __int128 expect = numel * dtype_size(info.dtype);
    if (expect != end - begin) {
      corrupt(what, where + " has " + std::to_string(end - begin) + " bytes but shape " +
                        json(info.shape).dump() + " of " + dtype_name(info.dtype) + " needs " +
                        std::to_string(static_cast<uint64_t>(expect)));
    }
    info.offset = data_start + begin;
    info.nbytes = end - begin;
    tensors.emplace(name, std::move(info));
  }

  // Tensors must not overlap (the format forbids it, and a lying header could alias weights).
  std::vector<const TensorInfo*> order;
  for (auto& [n, t] : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorInfo* prev = order[i - 1];
    if (prev->nbytes > 0 && order[i]->nbytes > 0 && prev->offset + prev->nbytes > order[i]->offset) {
      corrupt(what, "tensors '" + prev->name + "' and '" + order[i]->name + "' overlap");
    }
  }
  return tensors;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  tensors_ = parse_safetensors(file_.data(), file_.size(), path, &metadata_);
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    throw Error(ErrorKind::not_found, path() + ": no tensor named '" + name + "'");
  }
  return it->second;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& ti = info(name);
  void* p = const_cast<uint8_t*>(file_.data() + ti.offset);
  return Tensor::from_shape(p, ti.dtype, ti.shape.data(), static_cast<int>(ti.shape.size()));
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  std::vector<size_t> sizes;
  for (const auto& t : tensors) {
    size_t n = dtype_size(t.dtype);
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    header[t.name] = {{"dtype", dtype_to_safetensors(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + n}}};
    offset += n;
    sizes.push_back(n);
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(ErrorKind::io, path + ": cannot create");
  uint64_t len = h.size();
  char lenbuf[8];
  for (int i = 0; i < 8; ++i) lenbuf[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out.write(lenbuf, 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.write(static_cast<const char*>(tensors[i].data), static_cast<std::streamsize>(sizes[i]));
  }
  if (!out) throw Error(ErrorKind::io, path + ": write failed");
}

}  // namespace hibana
