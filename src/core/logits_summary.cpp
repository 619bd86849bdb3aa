#include "core/logits_summary.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/thread_pool.h"

namespace hibana {

bool LogitsSummary::logprob(int32_t token, float& out) const {
  for (size_t i = 0; i < id.size(); ++i) {
    if (id[i] != token) continue;
    out = static_cast<float>(value[i] - lse());
    return true;
  }
  return false;
}

double LogitsSummary::lse() const {
  return max + std::log(sum1);
}

void summarise_row(const float* row, int64_t vocab, float temperature, int64_t k, int32_t* out) {
  const int64_t n = std::min(k, vocab);
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  const float mx = row[idx[0]];
  double sum1 = 0.0, sumt = 0.0;
  if (temperature >= 0.0f) {
    for (int64_t v = 0; v < vocab; ++v) sum1 += std::exp(static_cast<double>(row[v]) - mx);
  }
  if (temperature > 0.0f) {
    const double inv_t = 1.0 / static_cast<double>(temperature);
    for (int64_t v = 0; v < vocab; ++v) {
      sumt += std::exp((static_cast<double>(row[v]) - mx) * inv_t);
    }
  }
  std::memset(out, 0, static_cast<size_t>(summary_words(k)) * sizeof(int32_t));
  std::memcpy(out, &sum1, sizeof(double));
  std::memcpy(out + 2, &sumt, sizeof(double));
  std::memcpy(out + 4, &mx, sizeof(float));
  out[5] = static_cast<int32_t>(n);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(out + 8 + i, &row[idx[i]], sizeof(float));
    out[8 + k + i] = idx[i];
  }
}

LogitsSummary unpack_summary(const int32_t* packed, int64_t k) {
  LogitsSummary s;
  std::memcpy(&s.sum1, packed, sizeof(double));
  std::memcpy(&s.sumt, packed + 2, sizeof(double));
  std::memcpy(&s.max, packed + 4, sizeof(float));
  const int64_t n = std::clamp<int64_t>(packed[5], 0, k);
  s.value.resize(static_cast<size_t>(n));
  s.id.assign(packed + 8 + k, packed + 8 + k + n);
  std::memcpy(s.value.data(), packed + 8, static_cast<size_t>(n) * sizeof(float));
  return s;
}

void summarise_rows(const Tensor& logits, const std::vector<float>& temperature, int64_t k,
                    Tensor out) {
  const int64_t R = logits.shape[0], V = logits.shape[1];
  check(logits.dtype == DType::f32 && out.dtype == DType::i32 && out.shape[0] == R &&
            out.shape[1] == summary_words(k) && static_cast<int64_t>(temperature.size()) == R &&
            k >= 1,
        ErrorKind::internal, "logits_summary: shapes");
  auto one = [&](int64_t r) {
    summarise_row(logits.row<float>(r), V, temperature[r], k, out.row<int32_t>(r));
  };
  if (R > 1) {
    default_thread_pool().parallel_for(R, one);
  } else if (R == 1) {
    one(0);
  }
}

void check_penalties(const Tensor& logits, const LogitsPenalties& p, const Tensor& out) {
  const int64_t R = logits.shape[0], V = logits.shape[1];
  check(logits.dtype == DType::f32 && out.dtype == DType::f32 && out.shape[0] == R &&
            out.shape[1] == V && p.rows() == R &&
            static_cast<int64_t>(p.offset.size()) == R + 1 &&
            p.token.size() == p.subtract.size(),
        ErrorKind::internal, "penalise_rows: shapes");
  for (const int32_t t : p.token) {
    check(t >= 0 && t < V, ErrorKind::internal, "penalise_rows: a token past the vocabulary");
  }
}

void penalise_rows(const Tensor& logits, const LogitsPenalties& p, Tensor out) {
  check_penalties(logits, p, out);
  const int64_t V = logits.shape[1];
  for (int64_t r = 0; r < logits.shape[0]; ++r) {
    const float* src = logits.row<float>(r);
    float* dst = out.row<float>(r);
    if (dst != src) std::memcpy(dst, src, static_cast<size_t>(V) * sizeof(float));
    for (int64_t i = p.offset[r]; i < p.offset[r + 1]; ++i) {
      const size_t e = static_cast<size_t>(i);
      dst[p.token[e]] = penalised_logit(src[p.token[e]], p.repetition[r], p.subtract[e]);
    }
  }
}

}  // namespace hibana
