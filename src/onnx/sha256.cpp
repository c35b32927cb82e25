#include "onnx/sha256.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define KILN_SHA_NI 1
#endif

namespace kiln::onnx {

namespace {

constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// One block by the FIPS 180-4 rounds.
void portable_block(uint32_t (&state)[8], const uint8_t* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3], e = state[4], f = state[5], g = state[6], h = state[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + w[i];
    const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a; state[1] += b; state[2] += c; state[3] += d;
  state[4] += e; state[5] += f; state[6] += g; state[7] += h;
}

#ifdef KILN_SHA_NI
// CPUID leaf 7: EBX bit 29 is the SHA extensions (every CPU that has them has SSE4.1 and SSSE3).
bool cpu_has_sha() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (b >> 29) & 1u;
}

// n blocks by the SHA extensions. sha256rnds2 keeps the eight working variables in two registers,
// {F, E, B, A} ("ABEF", lane 0 first) and {H, G, D, C} ("CDGH"), and does two rounds per call from
// the low two lanes of W + K; after two rounds the old ABEF is the new CDGH, so the two registers
// swap roles each call. sha256msg1/msg2 extend the message schedule four words at a time:
// W[i..i+3] = msg2(msg1(W[i-16..], W[i-12..]) + W[i-7..i-4], W[i-4..]).
__attribute__((target("sha,sse4.1,ssse3"))) void sha_ni_blocks(uint32_t (&state)[8], const uint8_t* p, size_t n) {
  const __m128i byteswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);  // big-endian words
  __m128i abcd = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));     // {A, B, C, D}
  __m128i efgh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4)); // {E, F, G, H}
  const __m128i badc = _mm_shuffle_epi32(abcd, 0xB1);                         // {B, A, D, C}
  const __m128i hgfe = _mm_shuffle_epi32(efgh, 0x1B);                         // {H, G, F, E}
  __m128i abef = _mm_alignr_epi8(badc, hgfe, 8);                              // {F, E, B, A}
  __m128i cdgh = _mm_blend_epi16(hgfe, badc, 0xF0);                           // {H, G, D, C}
  for (; n > 0; --n, p += 64) {
    const __m128i abef_in = abef, cdgstatein = cdgh;
    __m128i m[4];
    for (int i = 0; i < 4; ++i)
      m[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)), byteswap);
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
      const __m128i cur = m[g % 4];
      const __m128i wk = _mm_add_epi32(cur, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kRound + 4 * g)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);                       // rounds 4g, 4g+1: cdgh holds ABEF
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));  // rounds 4g+2, 4g+3
      if (g < 12) {
        const __m128i w7 = _mm_alignr_epi8(m[(g + 3) % 4], m[(g + 2) % 4], 4);  // W[4g+9 .. 4g+12]
        m[g % 4] = _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(cur, m[(g + 1) % 4]), w7), m[(g + 3) % 4]);
      }
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgstatein);
  }
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);  // {A, B, E, F}
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);  // {G, H, C, D}
  abcd = _mm_blend_epi16(feba, dchg, 0xF0);            // {A, B, C, D}
  efgh = _mm_alignr_epi8(dchg, feba, 8);               // {E, F, G, H}
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), abcd);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), efgh);
}
#endif

}  // namespace

bool Sha256::accelerated() {
#ifdef KILN_SHA_NI
  static const bool has = cpu_has_sha();
  return has;
#else
  return false;
#endif
}

Sha256::Sha256(bool portable)
    : portable_(portable || !accelerated()),
      h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::blocks(const uint8_t* p, size_t n) {
#ifdef KILN_SHA_NI
  if (!portable_) return sha_ni_blocks(h_, p, n);
#endif
  for (; n > 0; --n, p += 64) portable_block(h_, p);
}

void Sha256::update(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (buf_len_) {
    const size_t take = std::min(n, sizeof(buf_) - buf_len_);
    std::memcpy(buf_ + buf_len_, p, take);
    buf_len_ += take;
    p += take;
    n -= take;
    if (buf_len_ < sizeof(buf_)) return;
    blocks(buf_, 1);
    buf_len_ = 0;
  }
  blocks(p, n / 64);
  p += n / 64 * 64;
  n %= 64;
  std::memcpy(buf_, p, n);
  buf_len_ = n;
}

std::string Sha256::hex_digest() {
  const uint64_t bits = total_ * 8;
  const uint8_t pad = 0x80;
  update(&pad, 1);
  const uint8_t zero = 0;
  while (buf_len_ != 56) update(&zero, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(len, 8);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (uint32_t v : h_)
    for (int s = 28; s >= 0; s -= 4) out += kHex[(v >> s) & 0xf];
  return out;
}

std::string sha256_hex(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.hex_digest();
}

}  // namespace kiln::onnx
