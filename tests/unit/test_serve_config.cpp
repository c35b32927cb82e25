// `kiln serve`'s model configuration (src/serve/model_config.h): config.pbtxt read through the text
// format, errors naming the file, line and field, contradictions refused, build options from parameters.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz/serve_model.h"
#include "serve/model_config.h"

namespace kiln::serve {
namespace {

namespace fs = std::filesystem;

// A model folder holding `text` as its config.pbtxt (none when empty), one per test, removed after it.
std::string model_dir(const std::string& text) {
  struct Folder {
    fs::path path;
    ~Folder() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static Folder folder{fs::temp_directory_path() / ("kiln_serve_config_" + std::to_string(::getpid()))};
  const fs::path dir = folder.path / ::testing::UnitTest::GetInstance()->current_test_info()->name();
  fs::remove_all(dir);
  fs::create_directories(dir);
  if (!text.empty()) std::ofstream(dir / "config.pbtxt") << text;
  return dir.string();
}

Status error_of(const std::string& text) {
  auto spec = read_model_config(model_dir(text), "m");
  return spec.ok() ? Status::Ok() : spec.status();
}

void expect_error(const std::string& text, const std::vector<std::string>& parts) {
  Status st = error_of(text);
  ASSERT_FALSE(st.ok()) << text;
  for (const std::string& p : parts) EXPECT_NE(st.message().find(p), std::string::npos) << st.message();
}

TEST(ServeConfig, ReadsTheFieldsKilnUses) {
  auto spec = read_model_config(model_dir(R"(
    name: "m"
    platform: "onnxruntime_onnx"
    max_batch_size: 8
    input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, -1 ] } ]
    output [ { name: "y" data_type: TYPE_INT64 dims: [ 1 ] reshape: { shape: [ ] } } ]
    dynamic_batching {
      preferred_batch_size: [ 4, 8 ]
      max_queue_delay_microseconds: 500
      default_queue_policy { max_queue_size: 10 default_timeout_microseconds: 2000 }
    }
    instance_group [ { count: 2 kind: KIND_CPU } ]
    version_policy { latest { num_versions: 2 } }
    parameters { key: "precision" value: { string_value: "fp16" } }
  )"), "m");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->max_batch_size, 8);
  ASSERT_EQ(spec->inputs.size(), 1u);
  EXPECT_EQ(spec->inputs[0].dtype, DataType::kFloat32);
  EXPECT_EQ(spec->inputs[0].dims, (std::vector<int64_t>{3, -1}));
  EXPECT_TRUE(spec->outputs[0].has_reshape);
  EXPECT_TRUE(spec->dynamic_batching);
  EXPECT_EQ(spec->batcher.max_batch_size, 8);
  EXPECT_EQ(spec->batcher.preferred_batch_sizes, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(spec->batcher.max_queue_delay.count(), 500);
  EXPECT_EQ(spec->batcher.max_queue_size, 10u);
  EXPECT_EQ(spec->batcher.default_timeout.count(), 2000);
  EXPECT_EQ(spec->instance_count, 2);
  EXPECT_EQ(spec->instance_kind, "KIND_CPU");
  EXPECT_EQ(spec->latest_versions, 2);
  int threads = -1;
  auto options = build_options_of(*spec, DeviceType::kCPU, &threads);
  ASSERT_TRUE(options.ok()) << options.status().to_string();
  EXPECT_EQ(options->precision, Precision::kFloat16);
  EXPECT_EQ(threads, 0);
}

TEST(ServeConfig, NoFileIsAConfigToDerive) {
  auto spec = read_model_config(model_dir(""), "m");
  ASSERT_TRUE(spec.ok());
  EXPECT_NE(spec->source.find("derived"), std::string::npos);
}

TEST(ServeConfig, ErrorsNameTheFileLineAndField) {
  expect_error("max_batch_size: 4\nsequence_batching { }\n", {"config.pbtxt:2:", "sequence_batching"});
  expect_error("max_batch_size: \"four\"\n", {"config.pbtxt:1:", "max_batch_size"});
  expect_error("input [ { name: \"x\" data_type: TYPE_FLOAT } ]\n", {"config.pbtxt:1:", "TYPE_FLOAT"});
  expect_error("max_batch_size: 1\nmax_batch_size: 2\n", {"config.pbtxt:2:", "max_batch_size"});
}

TEST(ServeConfig, RefusesContradictions) {
  expect_error("dynamic_batching { }\n", {"config.pbtxt:1:", "dynamic_batching", "max_batch_size > 0"});
  expect_error("max_batch_size: 4\ndynamic_batching { preferred_batch_size: [ 2, 8 ] }\n",
               {"config.pbtxt:2:", "preferred_batch_size", "8 is outside 1..max_batch_size (4)"});
  expect_error("instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]\n", {"instance_group", "gpus listed for KIND_CPU"});
  expect_error("name: \"other\"\n", {"config.pbtxt:1:", "'other' is not the model's folder name 'm'"});
  expect_error("platform: \"tensorflow_savedmodel\"\n", {"platform", "not served by kiln"});
  expect_error("input [ { name: \"x\" dims: [ 0 ] } ]\n", {"input", "dim 0"});
  expect_error("max_batch_size: -1\n", {"max_batch_size", ">= 0"});
}

TEST(ServeConfig, UnknownOrBadParametersAreErrors) {
  auto spec = read_model_config(model_dir("parameters { key: \"precisoin\" value: { string_value: \"fp16\" } }\n"), "m");
  ASSERT_TRUE(spec.ok());
  int threads = 0;
  auto options = build_options_of(*spec, DeviceType::kCPU, &threads);
  ASSERT_FALSE(options.ok());
  EXPECT_NE(options.status().message().find("'precisoin': unknown parameter"), std::string::npos)
      << options.status().message();
  spec->parameters = {{"opt_level", "9"}};
  options = build_options_of(*spec, DeviceType::kCPU, &threads);
  ASSERT_FALSE(options.ok());
  EXPECT_NE(options.status().message().find("'opt_level'"), std::string::npos) << options.status().message();
  spec->parameters = {{"half_outputs", "yes"}};
  options = build_options_of(*spec, DeviceType::kCUDA, &threads);
  ASSERT_FALSE(options.ok());
  EXPECT_NE(options.status().message().find("'half_outputs': 'yes' is not true or false"), std::string::npos)
      << options.status().message();
  // Read as the build option (the builder refuses it for an engine whose float tensors stay float32).
  spec->parameters = {{"precision", "fp16"}, {"half_outputs", "true"}};
  options = build_options_of(*spec, DeviceType::kCUDA, &threads);
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_TRUE(options->half_outputs);
  spec->parameters = {{"half_outputs", "0"}};
  options = build_options_of(*spec, DeviceType::kCUDA, &threads);
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_FALSE(options->half_outputs);
}

// A FIFO (or a device) named config.pbtxt would block the server's start forever, and a huge file
// would be read whole: both are refused by name before anything is read (#47 item 4).
TEST(ServeConfig, SpecialAndHugeFilesAreRefused) {
  const std::string dir = model_dir("");
  ASSERT_EQ(::mkfifo((fs::path(dir) / "config.pbtxt").c_str(), 0600), 0);
  auto fifo = read_model_config(dir, "m");
  ASSERT_FALSE(fifo.ok());
  EXPECT_NE(fifo.status().message().find("config.pbtxt: not a regular file"), std::string::npos) << fifo.status().message();
  fs::remove(fs::path(dir) / "config.pbtxt");
  {
    std::ofstream big(fs::path(dir) / "config.pbtxt");
    big << "max_batch_size: 4\n";
    big << std::string(kMaxConfigBytes, ' ');
  }
  auto huge = read_model_config(dir, "m");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("not a model configuration"), std::string::npos) << huge.status().message();
}

// The text alone parses as the file does, its errors naming the source given.
TEST(ServeConfig, ParsesTextWithItsSourceName) {
  auto spec = parse_model_config("max_batch_size: 4\ninput [ { name: \"x\" data_type: TYPE_FP32 dims: [ 2 ] } ]\n",
                                 "inline", "m");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->max_batch_size, 4);
  EXPECT_EQ(spec->source, "inline");
  auto bad = parse_model_config("max_batch_size: \"four\"\n", "inline", "m");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("inline"), std::string::npos) << bad.status().message();
}

// fuzz_serve's model (tests/fuzz/serve_model.h) is a valid configuration: the harness aborts otherwise.
TEST(ServeConfig, TheFuzzersModelParses) {
  auto spec = parse_model_config(kiln::fuzz::kServeModelConfig, "fuzz config", "m");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->inputs.size(), 5u);
  EXPECT_EQ(spec->outputs.size(), 3u);
}

TEST(ServeConfig, TypeNames) {
  EXPECT_EQ(config_type_name(DataType::kFloat32), "TYPE_FP32");
  EXPECT_EQ(protocol_type_name(DataType::kString), "BYTES");
  EXPECT_EQ(protocol_type("INT64"), DataType::kInt64);
  EXPECT_EQ(protocol_type("FLOAT"), DataType::kUndefined);
}

}  // namespace
}  // namespace kiln::serve
