// onnx/proto_nesting.h — a serialized ModelProto read from the wire format without protobuf: whether
// its structure is sound (checked before protobuf parses it), and how deep it nests its messages (to
// explain a model protobuf refused).
//
// protobuf refuses a message nested more than 100 deep (its default recursion limit, which
// onnxruntime and onnx.load keep as well; kiln keeps it, so what one reads the others read) and
// says only that parsing failed. Subgraphs are where ONNX nests without bound: each If/Loop/Scan
// body is a GraphProto inside an AttributeProto inside a NodeProto, three messages a level, so
// about 31 levels fit; types (sequence of sequence of ...) are the other place.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

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

// Checks the wire format of a serialized ModelProto before protobuf parses it: every tag (a field
// number of 1 or more, wire type 0, 1, 2, 5, or a matched group 3/4), every varint, fixed field and
// length inside its enclosing message, descending into the messages on the paths to graphs, nodes,
// attributes, tensors and types (the messages of onnx.proto a model is made of). "" when sound;
// otherwise what is wrong, at which byte offset of `bytes` and in which message, e.g. "at byte
// 1048576 (ModelProto, top level): field number 0 (a zero byte where a field must start; trailing
// bytes after the model?)". Linear in the fields walked, allocates only its stack, touches only the
// bytes of tags and lengths (a file of 2 GB of zeros fails at its first zero at once). protobuf may
// still refuse what this accepts (it checks more than the wire format of these messages).
std::string model_wire_error(std::string_view bytes);

// The weights of a model kept out of protobuf's parse: `bytes` (a ModelProto whose wire format
// model_wire_error accepted) with every raw_data of at least `min_bytes` in the main graph's
// initializers emptied, and in `raw` per initializer of that graph (in file order) a view of its
// raw_data in `bytes` (empty where it was left in place). protobuf then copies only the model's
// structure, and the importer reads those weights once, straight from `bytes` into their tensors
// (parsing a 600 MB model had copied every weight into a protobuf string first). Returns "" (and
// leaves `raw` empty) where there is nothing to take out, or where the layout is one it does not
// rewrite (more than one graph field, groups): then the model is parsed as it is. Parsing the
// result gives the same model as parsing `bytes`, but for those raw_data fields being empty.
std::string model_without_weights(std::string_view bytes, size_t min_bytes, std::vector<std::string_view>& raw);

}  // namespace kiln::onnx
