// onnx/proto_nesting.h — how deep a serialized ModelProto nests its messages, read from the wire
// format without protobuf, to explain a model protobuf refused.
//
// protobuf refuses a message nested more than 100 deep (its default recursion limit, which
// onnxruntime and onnx.load keep as well; kiln keeps it, so what one reads the others read) and
// says only that parsing failed. Subgraphs are where ONNX nests without bound: each If/Loop/Scan
// body is a GraphProto inside an AttributeProto inside a NodeProto, three messages a level, so
// about 31 levels fit; types (sequence of sequence of ...) are the other place.
#pragma once

#include <string_view>

namespace kiln::onnx {

// protobuf's default recursion limit: the deepest message nesting ParseFromArray accepts.
constexpr int kProtobufNestingLimit = 100;

struct ProtoNesting {
  int message_depth = 0;   // the deepest message below the ModelProto (its graph is depth 1)
  int subgraph_depth = 0;  // the deepest graph inside graphs (the main graph is 0)
};

// Follows only the fields that lead to graphs and types; stops quietly at malformed bytes (it only
// explains a refusal) and stops descending past 10,000 levels.
ProtoNesting model_proto_nesting(std::string_view bytes);

}  // namespace kiln::onnx
