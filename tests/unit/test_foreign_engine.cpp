// Engines built for another machine of the same device kind (#45 step 1): refused by default with a
// message naming the fingerprints and the option; rebuilt from the graph they hold under
// OnMismatch::kRebuild; rebuilt and kept beside the original under kRebuildAndSave, that copy reused
// while it derives from the same original. A "foreign" CPU engine is made here by rewriting the
// fingerprint in a real engine's header (write_engine_file re-seals it), as a file from another
// machine would read. On a GPU machine, the committed H100 engine is the foreign one.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include "backends/backend.h"
#include "engine/engine_file.h"
#include "kiln/kiln.h"
#include "runtime/engine_impl.h"
#include "source_dir.h"

using namespace kiln;

namespace {

const std::string kExample = testing_support::source_dir() + "/examples/tiny_cnn.onnx";
const std::string kExampleInput = testing_support::source_dir() + "/examples/tiny_cnn_input.npy";

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// `bytes` (an engine file) with its fingerprint replaced (and its device, when given), re-sealed.
std::string with_fingerprint(const std::string& bytes, const std::string& fingerprint, const std::string& device = "") {
  auto st = std::make_shared<Storage>();
  auto* copy = new char[bytes.size()];
  std::memcpy(copy, bytes.data(), bytes.size());
  st->data = copy;
  st->bytes = bytes.size();
  st->release = [](void* p) { delete[] static_cast<char*>(p); };
  auto e = read_engine_file(st, /*for_rebuild=*/true);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return "";
  e->meta["fingerprint"] = fingerprint;
  if (!device.empty()) e->meta["device"] = device;
  auto out = write_engine_file(*e);
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  return out.ok() ? *out : "";
}

std::vector<float> run_example(Engine& e) {
  auto x = read_npy(kExampleInput);
  EXPECT_TRUE(x.ok());
  auto ctx = e.create_context();
  EXPECT_TRUE(ctx.ok()) << ctx.status().to_string();
  auto out = (*ctx)->run({{"image", Value::of(*x)}});
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  if (!out.ok()) return {};
  const Tensor& y = (*out)[0].tensor;
  return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("kiln_foreign_" + std::to_string(::getpid()) + "_" +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

EngineLoadOptions policy(OnMismatch m) {
  EngineLoadOptions o;
  o.on_mismatch = m;
  return o;
}

// The example's CPU engine (`built`, its output `want`, its file `bytes`) and a foreign copy of it at
// `path` in a fresh folder.
class ForeignEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = Engine::build(kExample);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    built = *b;
    want = run_example(*built);
    auto s = built->serialize();
    ASSERT_TRUE(s.ok());
    bytes = *s;
    path = (dir.path / "m.kiln").string();
    foreign = with_fingerprint(bytes, "cpu another-machine");
    write_bytes(path, foreign);
  }
  size_t files() const {
    return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(dir.path), std::filesystem::directory_iterator{}));
  }
  std::shared_ptr<Engine> built;
  std::vector<float> want;
  std::string bytes, path, foreign;
  TempDir dir;
};

}  // namespace

TEST_F(ForeignEngine, RefusedByDefaultNamingTheFingerprintsAndTheOption) {
  for (bool with_options : {false, true}) {
    auto e = with_options ? Engine::load(path, policy(OnMismatch::kError)) : Engine::load(path);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), StatusCode::kEngineMismatch);
    for (const char* part : {"cpu another-machine", "cpu x86_64", "on_mismatch = rebuild", "--on-mismatch rebuild"})
      EXPECT_NE(e.status().message().find(part), std::string::npos) << part << " in: " << e.status().message();
  }
  auto name = parse_on_mismatch("rebuild-later");
  ASSERT_FALSE(name.ok());
  EXPECT_NE(name.status().message().find("rebuild-and-save"), std::string::npos) << name.status().message();
}

TEST_F(ForeignEngine, RebuildComputesTheSameAndLeavesTheFileAlone) {
  auto e = Engine::load(path, policy(OnMismatch::kRebuild));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  auto meta = (*e)->metadata();
  EXPECT_EQ(meta["rebuilt_from"], "cpu another-machine");
  EXPECT_EQ(meta["fingerprint"], "cpu x86_64");
  EXPECT_EQ(meta["model_hash"], built->metadata()["model_hash"]);
  EXPECT_EQ(meta.count("foreign"), 0u);
  EXPECT_EQ(run_example(**e), want);  // the same graph lowered the same way: bit-identical
  EXPECT_EQ(read_bytes(path), foreign);
  EXPECT_EQ(files(), 1u);
  // The rebuilt engine saves and loads as a native one.
  auto again = (*e)->serialize();
  ASSERT_TRUE(again.ok());
  auto native = Engine::load_from_bytes(*again);
  ASSERT_TRUE(native.ok()) << native.status().to_string();
  EXPECT_EQ(run_example(**native), want);
}

TEST_F(ForeignEngine, RebuildAndSaveKeepsTheRebuiltEngineBesideTheOriginal) {
  auto beside = Engine::rebuilt_path(path);
  ASSERT_TRUE(beside.ok()) << beside.status().to_string();
  EXPECT_EQ(std::filesystem::path(*beside).parent_path(), dir.path);
  EXPECT_EQ(std::filesystem::path(*beside).filename().string().size(), std::string("m.12345678.kiln").size()) << *beside;
  auto e = Engine::load(path, policy(OnMismatch::kRebuildAndSave));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(read_bytes(path), foreign);
  ASSERT_TRUE(std::filesystem::is_regular_file(*beside));
  auto saved = Engine::load(*beside);  // strictly: it was built for this machine
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  EXPECT_EQ(run_example(**saved), want);
  EXPECT_EQ((*saved)->metadata()["rebuilt_from"], "cpu another-machine");
  // Loaded again, the saved engine is the answer: not rebuilt, not rewritten.
  const auto first_write = std::filesystem::last_write_time(*beside);
  const std::string saved_bytes = read_bytes(*beside);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto second = Engine::load(path, policy(OnMismatch::kRebuildAndSave));
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(std::filesystem::last_write_time(*beside), first_write);
  EXPECT_EQ(read_bytes(*beside), saved_bytes);
  // A changed original (another machine's engine in its place) is rebuilt again, and the copy replaced.
  write_bytes(path, with_fingerprint(bytes, "cpu third-machine"));
  auto third = Engine::load(path, policy(OnMismatch::kRebuildAndSave));
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  EXPECT_EQ((*third)->metadata()["rebuilt_from"], "cpu third-machine");
  auto resaved = Engine::load(*beside);
  ASSERT_TRUE(resaved.ok());
  EXPECT_EQ((*resaved)->metadata()["rebuilt_from"], "cpu third-machine");
  EXPECT_EQ(run_example(**resaved), want);
}

// An engine for a device this machine lacks, or a damaged one, is refused under every policy.
TEST_F(ForeignEngine, NoRebuildForAMissingDeviceOrADamagedFile) {
  const std::string damaged = (dir.path / "damaged.kiln").string();
  std::string bad = foreign;
  bad[bad.size() / 2] ^= 0x40;
  write_bytes(damaged, bad);
  for (OnMismatch m : {OnMismatch::kRebuild, OnMismatch::kRebuildAndSave}) {
    auto e = Engine::load(damaged, policy(m));
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("checksum"), std::string::npos) << e.status().message();
  }
  EXPECT_EQ(files(), 2u);  // m.kiln and damaged.kiln: nothing saved
  // An engine of an older format (the committed H100 engine is format 1) is refused under every policy.
  const std::string h100 = testing_support::source_dir() + "/tests/data/tiny_cnn_h100.kiln";
  for (OnMismatch m : {OnMismatch::kRebuild, OnMismatch::kRebuildAndSave}) {
    auto e = Engine::load(h100, policy(m));
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("format version 1"), std::string::npos) << e.status().message();
  }
  if (backend_for(DeviceType::kCUDA).ok()) GTEST_SKIP() << "this machine has a GPU (ForeignCudaEngine.RebuildsHere covers it)";
  const std::string cuda = (dir.path / "cuda.kiln").string();
  write_bytes(cuda, with_fingerprint(bytes, "NVIDIA H999", "cuda"));
  auto e = Engine::load(cuda, policy(OnMismatch::kRebuild));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kEngineMismatch);
  EXPECT_NE(e.status().message().find("not available here"), std::string::npos) << e.status().message();
}

// On a GPU: a CUDA engine whose fingerprint names another GPU rebuilds here (lowered and tuned again)
// and computes what the engine it was made from does.
TEST(ForeignCudaEngine, RebuildsHere) {
  if (!backend_for(DeviceType::kCUDA).ok()) GTEST_SKIP() << "no GPU";
  BuildOptions o;
  o.device = DeviceType::kCUDA;
  auto built = Engine::build(kExample, o);
  ASSERT_TRUE(built.ok()) << built.status().to_string();
  const auto want = run_example(**built);
  auto bytes = (*built)->serialize();
  ASSERT_TRUE(bytes.ok());
  TempDir dir;
  const std::string path = (dir.path / "m.kiln").string();
  write_bytes(path, with_fingerprint(*bytes, "NVIDIA H999; sm_90; CUDA runtime 99.0"));
  ASSERT_FALSE(Engine::load(path).ok());
  auto e = Engine::load(path, policy(OnMismatch::kRebuild));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ((*e)->metadata()["rebuilt_from"], "NVIDIA H999; sm_90; CUDA runtime 99.0");
  EXPECT_EQ((*e)->device(), DeviceType::kCUDA);
  const auto got = run_example(**e);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << i;
}

// The format promise (#45 item 5): an engine file written by an earlier kiln keeps loading. The
// committed tests/data/tiny_cnn_cpu_format3.kiln (kiln 0.1.0, format 3, a CPU with AVX-512: on one
// without it loads with a warning) loads, runs, and computes what a fresh build of the example does.
// A change of the engine format must keep this test passing (read the old format, or migrate it with
// a message saying so); add a file here for each new format version.
TEST(FormatPromise, EarlierFormatFilesLoadAndRun) {
  const std::string path = testing_support::source_dir() + "/tests/data/tiny_cnn_cpu_format3.kiln";
  auto old = Engine::load(path);
  ASSERT_TRUE(old.ok()) << old.status().to_string();
  EXPECT_EQ((*old)->metadata()["format_version"], "3");
  EXPECT_EQ((*old)->metadata()["kiln_version"], "0.1.0");
  auto fresh = Engine::build(kExample);
  ASSERT_TRUE(fresh.ok());
  const auto want = run_example(**fresh), got = run_example(**old);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << i;
}

// Review findings on rebuild-and-save: a rebuilt engine that cannot be kept (its name taken by a
// folder) still loads; a copy beside the file that others may write is not trusted (rebuilt and
// replaced: a new inode), while this user's own copy is reused (the same inode).
TEST_F(ForeignEngine, RebuildAndSaveTrustsOnlyItsOwnCopyAndSurvivesNotKeepingIt) {
  auto beside = Engine::rebuilt_path(path);
  ASSERT_TRUE(beside.ok());
  std::filesystem::create_directory(*beside);
  auto e = Engine::load(path, policy(OnMismatch::kRebuildAndSave));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(run_example(**e), want);
  EXPECT_TRUE(std::filesystem::is_directory(*beside));
  std::filesystem::remove(*beside);
  ASSERT_TRUE(Engine::load(path, policy(OnMismatch::kRebuildAndSave)).ok());
  auto inode = [&] {
    struct stat st {};
    EXPECT_EQ(::stat(beside->c_str(), &st), 0);
    return st.st_ino;
  };
  const auto own = inode();
  ASSERT_TRUE(Engine::load(path, policy(OnMismatch::kRebuildAndSave)).ok());
  EXPECT_EQ(inode(), own);  // reused
  std::filesystem::permissions(*beside, std::filesystem::perms::others_write, std::filesystem::perm_options::add);
  ASSERT_TRUE(Engine::load(path, policy(OnMismatch::kRebuildAndSave)).ok());
  EXPECT_NE(inode(), own);  // not trusted: rebuilt and replaced
  struct stat st {};
  ASSERT_EQ(::stat(beside->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & S_IWOTH, 0u);
}
