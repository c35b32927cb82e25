// onnx/proto_nesting.cpp — the wire-format walk of proto_nesting.h: an explicit stack, never
// recursion, so a hostile file cannot exhaust the C++ stack here either.
#include "onnx/proto_nesting.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace kiln::onnx {
namespace {

// The message types on the paths to graphs and types (field numbers from onnx.proto).
enum class Msg : uint8_t { kNone, kModel, kTraining, kGraph, kFunction, kNode, kAttribute, kValueInfo, kType,
                           kTypeTensor, kTypeElem, kTypeMap, kShape, kDim };
struct Edge { Msg from; uint32_t field; Msg to; };
constexpr Edge kEdges[] = {
    {Msg::kModel, 7, Msg::kGraph},        {Msg::kModel, 25, Msg::kFunction},   {Msg::kModel, 20, Msg::kTraining},
    {Msg::kTraining, 1, Msg::kGraph},     {Msg::kTraining, 2, Msg::kGraph},
    {Msg::kGraph, 1, Msg::kNode},         {Msg::kGraph, 11, Msg::kValueInfo},  {Msg::kGraph, 12, Msg::kValueInfo},
    {Msg::kGraph, 13, Msg::kValueInfo},   {Msg::kFunction, 7, Msg::kNode},     {Msg::kFunction, 12, Msg::kValueInfo},
    {Msg::kNode, 5, Msg::kAttribute},     {Msg::kAttribute, 6, Msg::kGraph},   {Msg::kAttribute, 11, Msg::kGraph},
    {Msg::kAttribute, 14, Msg::kType},    {Msg::kAttribute, 15, Msg::kType},   {Msg::kValueInfo, 2, Msg::kType},
    {Msg::kType, 1, Msg::kTypeTensor},    {Msg::kType, 8, Msg::kTypeTensor},   {Msg::kType, 4, Msg::kTypeElem},
    {Msg::kType, 9, Msg::kTypeElem},      {Msg::kType, 5, Msg::kTypeMap},      {Msg::kTypeTensor, 2, Msg::kShape},
    {Msg::kTypeElem, 1, Msg::kType},      {Msg::kTypeMap, 2, Msg::kType},      {Msg::kShape, 1, Msg::kDim},
};
constexpr int kMaxWalkDepth = 10000;

Msg child(Msg from, uint64_t field) {
  for (const Edge& e : kEdges)
    if (e.from == from && e.field == field) return e.to;
  return Msg::kNone;
}

bool varint(std::string_view b, size_t& p, size_t end, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && p < end; shift += 7) {
    const auto c = static_cast<uint8_t>(b[p++]);
    v |= static_cast<uint64_t>(c & 0x7F) << shift;
    if (!(c & 0x80)) return true;
  }
  return false;
}

}  // namespace

ProtoNesting model_proto_nesting(std::string_view bytes) {
  struct Frame { Msg type; size_t end; int depth; int graphs; };
  std::vector<Frame> stack{{Msg::kModel, bytes.size(), 0, 0}};
  ProtoNesting out;
  size_t p = 0;
  while (!stack.empty()) {
    const Frame f = stack.back();
    if (p >= f.end) {
      stack.pop_back();
      continue;
    }
    uint64_t tag = 0, v = 0;
    if (!varint(bytes, p, f.end, tag)) break;
    const uint64_t wire = tag & 7;
    if (wire == 0) {
      if (!varint(bytes, p, f.end, v)) break;
    } else if (wire == 1 || wire == 5) {
      const size_t n = wire == 1 ? 8 : 4;
      if (f.end - p < n) break;
      p += n;
    } else if (wire == 2) {
      if (!varint(bytes, p, f.end, v) || v > f.end - p) break;
      const Msg c = child(f.type, tag >> 3);
      if (c == Msg::kNone || f.depth >= kMaxWalkDepth) {
        p += v;
        continue;
      }
      const int graphs = f.graphs + (c == Msg::kGraph);
      stack.push_back({c, p + v, f.depth + 1, graphs});
      out.message_depth = std::max(out.message_depth, f.depth + 1);
      out.subgraph_depth = std::max(out.subgraph_depth, graphs - 1);
    } else {
      break;  // groups (3, 4) are not in onnx.proto; 6, 7 do not exist
    }
  }
  return out;
}

}  // namespace kiln::onnx
