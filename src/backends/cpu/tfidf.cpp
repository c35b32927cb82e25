// backends/cpu/tfidf.cpp — TfIdfVectorizer on the CPU.
//
// TfIdfVectorizer counts, per row, the n-grams of the pool (lengths min_gram_length..
// max_gram_length) found at every start position with every skip distance 1..max_skip_count+1
// (unigrams once), then weights the counts (TF, IDF or TFIDF).
#include <algorithm>
#include <map>

#include "backends/cpu/rq_common.h"

namespace kiln::cpu::rq {
namespace {

struct TfIdf {
  int64_t min_gram = 1, max_gram = 1, max_skip = 0;
  enum class Mode { kTF, kIDF, kTFIDF } mode = Mode::kTF;
  bool strings = false;
  // n-gram (as a list of int64 or strings) → output column
  std::map<std::vector<int64_t>, int64_t> int_grams;
  std::map<std::vector<std::string>, int64_t> str_grams;
  std::vector<float> weights;
  int64_t out_size = 0;
};

Expected<TfIdf> parse_tfidf(const ir::Node& n) {
  TfIdf a;
  a.min_gram = n.attr_int("min_gram_length", 1);
  a.max_gram = n.attr_int("max_gram_length", 1);
  a.max_skip = n.attr_int("max_skip_count", 0);
  const std::string mode = n.attr_string("mode", "TF");
  if (mode == "TF") a.mode = TfIdf::Mode::kTF;
  else if (mode == "IDF") a.mode = TfIdf::Mode::kIDF;
  else if (mode == "TFIDF") a.mode = TfIdf::Mode::kTFIDF;
  else return invalid_model(n.describe() + ": mode must be TF, IDF or TFIDF");
  if (a.min_gram < 1 || a.max_gram < a.min_gram || a.max_skip < 0)
    return invalid_model(n.describe() + ": need 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0");
  const std::vector<int64_t> counts = n.attr_ints("ngram_counts"), indexes = n.attr_ints("ngram_indexes");
  const std::vector<int64_t> pool_i = n.attr_ints("pool_int64s");
  std::vector<std::string> pool_s;
  if (const ir::Attribute* ps = n.attr("pool_strings")) pool_s = ps->strings;
  a.strings = !pool_s.empty();
  a.weights = n.attr_floats("weights");
  const int64_t total = a.strings ? static_cast<int64_t>(pool_s.size()) : static_cast<int64_t>(pool_i.size());
  for (int64_t v : indexes) a.out_size = std::max(a.out_size, v + 1);
  int64_t gram_id = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t size = static_cast<int64_t>(i) + 1, begin = counts[i];
    const int64_t end = i + 1 < counts.size() ? counts[i + 1] : total;
    if (begin < 0 || end > total || end < begin) return invalid_model(n.describe() + ": ngram_counts out of the pool's range");
    for (int64_t p = begin; p + size <= end; p += size, ++gram_id) {
      if (gram_id >= static_cast<int64_t>(indexes.size())) return invalid_model(n.describe() + ": ngram_indexes too short");
      if (size < a.min_gram || size > a.max_gram) continue;
      if (a.strings) a.str_grams.emplace(std::vector<std::string>(pool_s.begin() + p, pool_s.begin() + p + size), indexes[gram_id]);
      else a.int_grams.emplace(std::vector<int64_t>(pool_i.begin() + p, pool_i.begin() + p + size), indexes[gram_id]);
    }
  }
  return a;
}

template <typename Item, typename Map>
void count_row(const TfIdf& a, const Map& grams, const std::vector<Item>& row, int64_t* freq) {
  const int64_t C = static_cast<int64_t>(row.size());
  int64_t start_size = a.min_gram;
  std::vector<Item> key;
  for (int64_t skip = 1; skip <= a.max_skip + 1; ++skip) {
    for (int64_t s = 0; s < C; ++s)
      for (int64_t size = start_size; size <= a.max_gram; ++size) {
        if (s + (size - 1) * skip >= C) break;
        key.clear();
        for (int64_t k = 0; k < size; ++k) key.push_back(row[s + k * skip]);
        auto it = grams.find(key);
        if (it != grams.end()) ++freq[it->second];
      }
    if (start_size == 1 && ++start_size > a.max_gram) break;  // unigrams only once
  }
}

Status tfidf_kernel(KernelContext& ctx, const TfIdf& a) {
  const Tensor& x = ctx.input(0);
  if (x.rank() > 2) return ctx.error("input must be [C] or [N, C]");
  if (a.strings != (x.dtype() == DataType::kString)) return ctx.error("input dtype does not match the pool (strings or int64s)");
  const int64_t rows = x.rank() == 2 ? x.dim(0) : 1, C = x.rank() == 0 ? 1 : x.dim(-1);
  const Shape out_shape = x.rank() == 2 ? Shape{rows, a.out_size} : Shape{a.out_size};
  std::vector<int64_t> freq(static_cast<size_t>(rows * a.out_size), 0);
  for (int64_t r = 0; r < rows; ++r) {
    if (a.strings) {
      std::vector<std::string> row(x.data<std::string>() + r * C, x.data<std::string>() + (r + 1) * C);
      count_row(a, a.str_grams, row, &freq[r * a.out_size]);
    } else {
      std::vector<int64_t> row(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c)
        row[c] = x.dtype() == DataType::kInt64 ? x.data<int64_t>()[r * C + c] : x.data<int32_t>()[r * C + c];
      count_row(a, a.int_grams, row, &freq[r * a.out_size]);
    }
  }
  Tensor& y = ctx.output(0, DataType::kFloat32, out_shape);
  float* out = y.data<float>();
  for (int64_t i = 0; i < rows * a.out_size; ++i) {
    const int64_t col = i % a.out_size;
    const bool w = !a.weights.empty() && col < static_cast<int64_t>(a.weights.size());
    const float f = static_cast<float>(freq[i]);
    switch (a.mode) {
      case TfIdf::Mode::kTF: out[i] = f; break;
      case TfIdf::Mode::kIDF: out[i] = freq[i] > 0 ? (w ? a.weights[col] : 1.0f) : 0.0f; break;
      case TfIdf::Mode::kTFIDF: out[i] = w ? a.weights[col] * f : f; break;
    }
  }
  return Status::Ok();
}

}  // namespace

void register_text(KernelRegistry& r) {
  r.add({"TfIdfVectorizer", "", 9, 1 << 30, "cpu.TfIdfVectorizer.any",
         [](const ir::Node& n) { return require_dtypes(n, 0, {DataType::kInt32, DataType::kInt64, DataType::kString}); },
         [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
           KILN_ASSIGN_OR_RETURN(TfIdf a, parse_tfidf(n));
           return make_kernel([a](KernelContext& ctx) { return tfidf_kernel(ctx, a); });
         }});
}

}  // namespace kiln::cpu::rq
