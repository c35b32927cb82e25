// backends/cpu/tfidf.cpp — TfIdfVectorizer on the CPU.
//
// TfIdfVectorizer counts, per row, the n-grams of the pool (lengths min_gram_length..
// max_gram_length) found at every start position with every skip distance 1..max_skip_count+1
// (unigrams once), then weights the counts (TF, IDF or TFIDF).
#include <algorithm>
#include <map>

#include "backends/cpu/numeric_f64.h"
#include "ops/params_ml.h"

namespace kiln::cpu {
namespace {

// The node's parameters with its n-gram → output column maps (one per pool kind).
struct TfIdf {
  ops::TfIdfParams p;
  std::map<std::vector<int64_t>, int64_t> int_grams;
  std::map<std::vector<std::string>, int64_t> str_grams;
};

TfIdf make_tfidf(ops::TfIdfParams p) {
  TfIdf a;
  for (const ops::TfIdfParams::NGram& g : p.ngrams) {  // a repeated n-gram keeps its first column
    if (p.strings) {
      const auto first = p.pool_strings.begin() + g.begin;
      a.str_grams.emplace(std::vector<std::string>(first, first + g.size), g.column);
    } else {
      const auto first = p.pool_int64s.begin() + g.begin;
      a.int_grams.emplace(std::vector<int64_t>(first, first + g.size), g.column);
    }
  }
  a.p = std::move(p);
  return a;
}

// O(C^2 x max_gram_length) for a row of C items when max_skip_count allows every skip: asks the context
// whether to stop once per skip distance, so --timeout and terminate end a long row.
template <typename Item, typename Map>
Status count_row(const KernelContext& ctx, const ops::TfIdfParams& a, const Map& grams, const std::vector<Item>& row,
                 int64_t* freq) {
  const int64_t C = static_cast<int64_t>(row.size());
  int64_t start_size = a.min_gram_length;
  std::vector<Item> key;
  // A skip of C or more fits no n-gram of two or more items in the row (a skip larger than the row
  // is the row): the work is bounded by the input, not by max_skip_count (INT64_MAX overflowed + 1).
  const int64_t last_skip = std::min(a.max_skip_count, std::max<int64_t>(C - 2, 0)) + 1;
  for (int64_t skip = 1; skip <= last_skip; ++skip) {
    KILN_RETURN_IF_ERROR(ctx.check_stop());
    for (int64_t s = 0; s < C; ++s)
      for (int64_t size = start_size; size <= a.max_gram_length; ++size) {
        if (size - 1 > (C - 1 - s) / skip) break;  // s + (size - 1) * skip is past the row, without overflow
        key.clear();
        for (int64_t k = 0; k < size; ++k) key.push_back(row[s + k * skip]);
        auto it = grams.find(key);
        if (it != grams.end()) ++freq[it->second];
      }
    if (start_size == 1 && ++start_size > a.max_gram_length) break;  // unigrams only once
  }
  return Status::Ok();
}

Status tfidf_kernel(KernelContext& ctx, const TfIdf& t) {
  const ops::TfIdfParams& a = t.p;
  const Tensor& x = ctx.input(0);
  if (x.rank() > 2) return ctx.error("input must be [C] or [N, C]");
  if (a.strings != (x.dtype() == DataType::kString)) return ctx.error("input dtype does not match the pool (strings or int64s)");
  const int64_t rows = x.rank() == 2 ? x.dim(0) : 1, C = x.rank() == 0 ? 1 : x.dim(-1);
  const Shape out_shape = x.rank() == 2 ? Shape{rows, a.out_size} : Shape{a.out_size};
  // The output first: its size (from ngram_indexes) is checked against the tensor limits there, before
  // the counts of the same size are allocated.
  Tensor& y = ctx.output(0, DataType::kFloat32, out_shape);
  // No columns (no ngram_indexes) or no rows: nothing to count (and &freq[0] of an empty vector would
  // bind a reference to null: the structure-aware fuzzer's find).
  if (y.numel() == 0) return Status::Ok();
  std::vector<int64_t> freq(static_cast<size_t>(y.numel()), 0);
  for (int64_t r = 0; r < rows; ++r) {
    if (a.strings) {
      std::vector<std::string> row(x.data<std::string>() + r * C, x.data<std::string>() + (r + 1) * C);
      KILN_RETURN_IF_ERROR(count_row(ctx, a, t.str_grams, row, &freq[r * a.out_size]));
    } else {
      std::vector<int64_t> row(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c)
        row[c] = x.dtype() == DataType::kInt64 ? x.data<int64_t>()[r * C + c] : x.data<int32_t>()[r * C + c];
      KILN_RETURN_IF_ERROR(count_row(ctx, a, t.int_grams, row, &freq[r * a.out_size]));
    }
  }
  float* out = y.data<float>();
  for (int64_t i = 0; i < rows * a.out_size; ++i) {
    const int64_t col = i % a.out_size;
    const bool w = !a.weights.empty() && col < static_cast<int64_t>(a.weights.size());
    const float f = static_cast<float>(freq[i]);
    switch (a.mode) {
      case ops::TfIdfParams::Mode::kTF: out[i] = f; break;
      case ops::TfIdfParams::Mode::kIDF: out[i] = freq[i] > 0 ? (w ? a.weights[col] : 1.0f) : 0.0f; break;
      case ops::TfIdfParams::Mode::kTFIDF: out[i] = w ? a.weights[col] * f : f; break;
    }
  }
  return Status::Ok();
}

}  // namespace

void register_text(KernelRegistry& r) {
  r.add({"TfIdfVectorizer", "", 9, 1 << 30, "cpu.TfIdfVectorizer.any",
         [](const ir::Node& n) { return require_dtypes(n, 0, {DataType::kInt32, DataType::kInt64, DataType::kString}); },
         [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
           KILN_ASSIGN_OR_RETURN(ops::TfIdfParams p, ops::parse_tfidf(n));
           return make_kernel([t = make_tfidf(std::move(p))](KernelContext& ctx) { return tfidf_kernel(ctx, t); });
         }});
}

}  // namespace kiln::cpu
