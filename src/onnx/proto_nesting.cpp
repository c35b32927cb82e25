// onnx/proto_nesting.cpp — the wire-format walk of proto_nesting.h: an explicit stack, never
// recursion, so a hostile file cannot exhaust the C++ stack here either.
#include "onnx/proto_nesting.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::onnx {
namespace {

// The messages of onnx.proto a model is made of, and which field of which leads to which (field
// numbers from onnx.proto). kLeaf: a message whose own fields are checked but not descended into.
enum class Msg : uint8_t { kNone, kModel, kTraining, kGraph, kFunction, kNode, kAttribute, kValueInfo, kType,
                           kTypeTensor, kTypeElem, kTypeMap, kShape, kDim, kTensor, kSparse, kLeaf };
constexpr const char* kMsgName[] = {"an unknown field's group", "ModelProto", "TrainingInfoProto", "GraphProto",
                                    "FunctionProto", "NodeProto", "AttributeProto", "ValueInfoProto", "TypeProto",
                                    "TypeProto.Tensor", "TypeProto.Sequence", "TypeProto.Map", "TensorShapeProto",
                                    "TensorShapeProto.Dimension", "TensorProto", "SparseTensorProto", "a message"};
struct Edge { Msg from; uint32_t field; Msg to; };
constexpr Edge kEdges[] = {
    {Msg::kModel, 7, Msg::kGraph},        {Msg::kModel, 25, Msg::kFunction},   {Msg::kModel, 20, Msg::kTraining},
    {Msg::kModel, 8, Msg::kLeaf},         {Msg::kModel, 14, Msg::kLeaf},       {Msg::kModel, 26, Msg::kLeaf},
    {Msg::kTraining, 1, Msg::kGraph},     {Msg::kTraining, 2, Msg::kGraph},    {Msg::kTraining, 3, Msg::kLeaf},
    {Msg::kTraining, 4, Msg::kLeaf},
    {Msg::kGraph, 1, Msg::kNode},         {Msg::kGraph, 11, Msg::kValueInfo},  {Msg::kGraph, 12, Msg::kValueInfo},
    {Msg::kGraph, 13, Msg::kValueInfo},   {Msg::kGraph, 5, Msg::kTensor},      {Msg::kGraph, 15, Msg::kSparse},
    {Msg::kGraph, 14, Msg::kLeaf},        {Msg::kGraph, 16, Msg::kLeaf},
    {Msg::kFunction, 7, Msg::kNode},      {Msg::kFunction, 12, Msg::kValueInfo}, {Msg::kFunction, 11, Msg::kAttribute},
    {Msg::kFunction, 9, Msg::kLeaf},      {Msg::kFunction, 14, Msg::kLeaf},
    {Msg::kNode, 5, Msg::kAttribute},     {Msg::kNode, 9, Msg::kLeaf},         {Msg::kNode, 10, Msg::kLeaf},
    {Msg::kAttribute, 6, Msg::kGraph},    {Msg::kAttribute, 11, Msg::kGraph},  {Msg::kAttribute, 14, Msg::kType},
    {Msg::kAttribute, 15, Msg::kType},    {Msg::kAttribute, 5, Msg::kTensor},  {Msg::kAttribute, 10, Msg::kTensor},
    {Msg::kAttribute, 22, Msg::kSparse},  {Msg::kAttribute, 23, Msg::kSparse},
    {Msg::kValueInfo, 2, Msg::kType},     {Msg::kValueInfo, 4, Msg::kLeaf},
    {Msg::kTensor, 3, Msg::kLeaf},        {Msg::kTensor, 13, Msg::kLeaf},      {Msg::kTensor, 16, Msg::kLeaf},
    {Msg::kSparse, 1, Msg::kTensor},      {Msg::kSparse, 2, Msg::kTensor},
    {Msg::kType, 1, Msg::kTypeTensor},    {Msg::kType, 8, Msg::kTypeTensor},   {Msg::kType, 4, Msg::kTypeElem},
    {Msg::kType, 9, Msg::kTypeElem},      {Msg::kType, 5, Msg::kTypeMap},      {Msg::kType, 7, Msg::kLeaf},
    {Msg::kTypeTensor, 2, Msg::kShape},   {Msg::kTypeElem, 1, Msg::kType},     {Msg::kTypeMap, 2, Msg::kType},
    {Msg::kShape, 1, Msg::kDim},
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

std::string model_wire_error(std::string_view bytes) {
  // A message (length-delimited: ends at `end`) or a group (ends at its end-group tag, `group` its field).
  struct Frame { Msg type; size_t end; uint32_t group; uint32_t field; size_t at; };
  std::vector<Frame> stack{{Msg::kModel, bytes.size(), 0, 0, 0}};
  size_t p = 0;
  auto fail = [&](size_t at, const std::string& what) {
    const Frame& f = stack.back();
    std::string where = kMsgName[static_cast<int>(f.type)];
    if (stack.size() == 1) {
      where += ", top level";
    } else {
      where += ", reached by fields";
      for (size_t i = 1; i < stack.size(); ++i)
        where += (i > 1 ? "." : " ") + std::to_string(stack[i].field);
      where += " from byte " + std::to_string(stack[1].at);
    }
    return "at byte " + std::to_string(at) + " (" + where + "): " + what;
  };
  while (true) {
    const Frame f = stack.back();
    if (p >= f.end) {
      if (f.group) return fail(p, "the group of field " + std::to_string(f.group) + " is not closed");
      if (stack.size() == 1) return "";
      stack.pop_back();
      continue;
    }
    const size_t at = p;
    uint64_t tag = 0, v = 0;
    if (!varint(bytes, p, f.end, tag)) return fail(at, "a field's tag runs past the end of its message");
    if (tag > UINT32_MAX) return fail(at, "a field's tag is over 32 bits");
    const auto field = static_cast<uint32_t>(tag >> 3);
    const uint64_t wire = tag & 7;
    if (field == 0)
      return fail(at, bytes[at] == 0 ? "a zero byte where a field must begin (bytes after the end of the model?)"
                                     : "field number 0");
    switch (wire) {
      case 0:
        if (!varint(bytes, p, f.end, v)) return fail(at, "field " + std::to_string(field) + "'s varint runs past the end of its message");
        break;
      case 1:
      case 5: {
        const size_t n = wire == 1 ? 8 : 4;
        if (f.end - p < n)
          return fail(at, "field " + std::to_string(field) + " needs " + std::to_string(n) + " bytes, " + std::to_string(f.end - p) + " remain");
        p += n;
        break;
      }
      case 2: {
        if (!varint(bytes, p, f.end, v)) return fail(at, "field " + std::to_string(field) + "'s length runs past the end of its message");
        if (v > f.end - p)
          return fail(at, "field " + std::to_string(field) + " declares " + std::to_string(v) + " bytes; " +
                              std::to_string(f.end - p) + " remain in its message");
        const Msg c = f.group ? Msg::kNone : child(f.type, field);
        if (c == Msg::kNone || stack.size() > static_cast<size_t>(kMaxWalkDepth)) {
          p += v;
          break;
        }
        stack.push_back({c, p + v, 0, field, at});
        break;
      }
      case 3:
        if (stack.size() > static_cast<size_t>(kMaxWalkDepth)) return fail(at, "groups nested deeper than " + std::to_string(kMaxWalkDepth));
        stack.push_back({Msg::kNone, f.end, field, field, at});
        break;
      case 4:
        if (f.group != field)
          return fail(at, "an end-group tag of field " + std::to_string(field) + " that no group of that field opened");
        stack.pop_back();
        break;
      default:
        return fail(at, "wire type " + std::to_string(wire) + " (of field " + std::to_string(field) + ") does not exist");
    }
  }
}

namespace {

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

// One field of a message [p, end): its number, wire type, where its tag began, and for a
// length-delimited field where its payload begins and ends. False at malformed bytes or a group.
struct Field {
  uint32_t number = 0;
  uint64_t wire = 0;
  size_t start = 0, body = 0, end = 0;
};
bool next_field(std::string_view b, size_t& p, size_t end, Field& f) {
  f.start = p;
  uint64_t tag = 0, v = 0;
  if (!varint(b, p, end, tag) || tag > UINT32_MAX || (tag >> 3) == 0) return false;
  f.number = static_cast<uint32_t>(tag >> 3);
  f.wire = tag & 7;
  switch (f.wire) {
    case 0:
      if (!varint(b, p, end, v)) return false;
      break;
    case 1:
    case 5: {
      const size_t n = f.wire == 1 ? 8 : 4;
      if (end - p < n) return false;
      p += n;
      break;
    }
    case 2:
      if (!varint(b, p, end, v) || v > end - p) return false;
      f.body = p;
      p += v;
      break;
    default:
      return false;  // groups (3, 4): not rewritten
  }
  f.end = p;
  return true;
}

// The fields of message [from, end), each copied as it is unless `edit` (field, out) wrote it and
// returned true. False when the bytes are not fields the rewrite understands.
template <class Edit>
bool rewrite_message(std::string_view b, size_t from, size_t end, std::string& out, Edit edit) {
  size_t p = from;
  Field f;
  while (p < end) {
    if (!next_field(b, p, end, f)) return false;
    bool ok = true;
    if (!edit(f, out, ok)) out.append(b.substr(f.start, f.end - f.start));
    if (!ok) return false;
  }
  return true;
}

void put_message(std::string& out, uint32_t number, const std::string& body) {
  put_varint(out, uint64_t{number} << 3 | 2);
  put_varint(out, body.size());
  out += body;
}

}  // namespace

std::string model_without_weights(std::string_view bytes, size_t min_bytes, std::vector<std::string_view>& raw) {
  raw.clear();
  constexpr uint32_t kModelGraph = 7, kGraphInitializer = 5, kTensorRawData = 9;
  // Only one graph field: protobuf merges repeated ones, which this rewrite does not reproduce.
  int graphs = 0;
  {
    size_t p = 0;
    Field f;
    while (p < bytes.size()) {
      if (!next_field(bytes, p, bytes.size(), f)) return "";
      graphs += f.number == kModelGraph && f.wire == 2;
    }
  }
  if (graphs != 1) return "";
  std::vector<std::string_view> found;
  bool any = false;
  std::string out;
  out.reserve(1 << 16);
  const bool ok = rewrite_message(bytes, 0, bytes.size(), out, [&](const Field& mf, std::string& mo, bool& mok) {
    if (mf.number != kModelGraph || mf.wire != 2) return false;
    std::string graph;
    mok = rewrite_message(bytes, mf.body, mf.end, graph, [&](const Field& gf, std::string& go, bool& gok) {
      if (gf.number != kGraphInitializer || gf.wire != 2) return false;
      // A bytes field given more than once keeps its last value (protobuf's rule): the view is the
      // last one's, and every one of them is emptied.
      std::string_view last;
      bool big = false;
      std::string tensor;
      gok = rewrite_message(bytes, gf.body, gf.end, tensor, [&](const Field& tf, std::string& to, bool&) {
        if (tf.number != kTensorRawData || tf.wire != 2) return false;
        last = bytes.substr(tf.body, tf.end - tf.body);
        big = last.size() >= min_bytes;
        put_varint(to, uint64_t{kTensorRawData} << 3 | 2);
        put_varint(to, 0);
        return true;
      });
      if (!gok) return true;
      if (!big) {  // left in place: the initializer as it was
        go.append(bytes.substr(gf.start, gf.end - gf.start));
        found.emplace_back();
        return true;
      }
      any = true;
      found.push_back(last);
      put_message(go, kGraphInitializer, tensor);
      return true;
    });
    if (mok) put_message(mo, kModelGraph, graph);
    return true;
  });
  if (!ok || !any) return "";
  raw = std::move(found);
  return out;
}

}  // namespace kiln::onnx
