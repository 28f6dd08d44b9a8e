// mxnet-amp's rounding kernels: MXNet 1.9 external operators (lib_api.h) that round float32
// values to float16 or bfloat16 and keep them in float32, bit for bit what the emulation's
// round trip amp_cast(amp_cast(x, low), float32) gives, in one vectorised pass.
//
//   mxnet_amp_round(x; dtype, flush_sign)       x rounded to dtype
//   mxnet_amp_round_bias(p, b; dtype, flush_sign)
//                                               round(round(p) + b), b broadcast on one axis:
//                                               MXNet's GPU conv / dense bias step, emulated
//
// float16: round to nearest even, subnormals kept, beyond 65504 +-inf (the F16C conversion; a
// scalar one of the same bits where the CPU has no F16C); a NaN as MXNet's cast converts it,
// not quieted (its payload's top 10 bits, or 1 where those are 0). bfloat16: round to
// nearest even, float32 subnormals flushed to zero (sign kept where flush_sign is 1, the
// machine's amp_cast says which), NaN quiet. Built and loaded by mxnet_amp/kernels/build.py.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include <immintrin.h>

#include "mxnet/lib_api.h"

using namespace mxnet::ext;

namespace {

typedef std::unordered_map<std::string, std::string> Attrs;

// --- scalar rounding -------------------------------------------------------------------------

inline uint32_t bits_of(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
inline float float_of(uint32_t u) { float x; std::memcpy(&x, &u, 4); return x; }

// float32 -> float16 bits, to nearest even (IEEE 754; what VCVTPS2PH computes), NaN as MXNet
// 1.9's mshadow half_t converts it
uint16_t half_bits(float x) {
  uint32_t u = bits_of(x);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u)   // NaN: as MXNet's cast, the payload's top bits, never quieted (1 if 0)
    return static_cast<uint16_t>(sign | (((a < 0x7F802000u ? 0x7F802000u : a) >> 13) & 0x7FFFu));
  if (a >= 0x477FF000u)  // rounds to beyond 65504: inf
    return static_cast<uint16_t>(sign | 0x7C00u);
  if (a >= 0x38800000u) {  // normal in float16 (>= 2**-14)
    uint32_t r = a - 0x38000000u;   // rebias the exponent (127 -> 15)
    r += 0x0FFFu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a < 0x33000000u)   // below half the smallest subnormal (2**-25): zero (2**-25 itself: even, 0)
    return sign;
  // subnormal in float16: the mantissa with its implicit bit, shifted, rounded to nearest even
  uint32_t e = a >> 23;
  uint32_t m = (a & 0x007FFFFFu) | 0x00800000u;
  uint32_t shift = 126u - e;   // 14 + (113 - e) - 1: the bits below float16's last subnormal bit
  uint32_t q = m >> shift;
  uint32_t rest = m & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

float float_of_half(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x03FFu;
  if (e == 0x1Fu) return float_of(sign | 0x7F800000u | (m << 13));
  if (e != 0) return float_of(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0) return float_of(sign);
  float v = static_cast<float>(m) * 5.9604644775390625e-08f;   // m * 2**-24, exact
  return sign ? -v : v;
}

inline float round_half_scalar(float x) { return float_of_half(half_bits(x)); }

inline float round_bf16_scalar(float x, uint32_t flush_mask) {
  uint32_t u = bits_of(x);
  if ((u & 0x7F800000u) == 0) return float_of(u & flush_mask);   // zero, subnormal: flushed
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return float_of((u | 0x00400000u) & 0xFFFF0000u);
  return float_of((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
}

// --- vectorised rounding (AVX2 + F16C; chosen at run time) ----------------------------------

__attribute__((target("avx2,f16c")))
void round_half_avx2(const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)));
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)))   // a NaN: F16C quiets it
      for (int64_t k = i; k < i + 8; ++k) out[k] = round_half_scalar(x[k]);
  }
  for (; i < n; ++i) out[i] = round_half_scalar(x[i]);
}

// p + b with b one value for all n (a conv's channel) or n values (a dense layer's row)
__attribute__((target("avx2,f16c")))
void round_bias_half_avx2(const float* p, const float* b, bool per_value, float* out, int64_t n) {
  __m256 bias = _mm256_set1_ps(*b);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(p + i);
    __m256 r = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    __m256 s = _mm256_add_ps(r, per_value ? _mm256_loadu_ps(b + i) : bias);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT)));
    if (_mm256_movemask_ps(_mm256_cmp_ps(s, s, _CMP_UNORD_Q)))   // a NaN: F16C quiets it
      for (int64_t k = i; k < i + 8; ++k)
        out[k] = round_half_scalar(round_half_scalar(p[k]) + b[per_value ? k : 0]);
  }
  for (; i < n; ++i) out[i] = round_half_scalar(round_half_scalar(p[i]) + b[per_value ? i : 0]);
}

__attribute__((target("avx2")))
inline __m256i round_bf16_bits_avx2(__m256i u, __m256i flush_mask) {
  const __m256i exp_mask = _mm256_set1_epi32(0x7F800000), abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), hi);
  __m256i is_tiny = _mm256_cmpeq_epi32(_mm256_and_si256(u, exp_mask), _mm256_setzero_si256());
  r = _mm256_blendv_epi8(r, _mm256_and_si256(u, flush_mask), is_tiny);
  // NaN: |u| > 0x7F800000 as signed ints (|u| < 2**31)
  __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), exp_mask);
  __m256i quiet = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), hi);
  return _mm256_blendv_epi8(r, quiet, is_nan);
}

__attribute__((target("avx2")))
void round_bf16_avx2(const float* x, float* out, int64_t n, uint32_t flush) {
  __m256i mask = _mm256_set1_epi32(static_cast<int>(flush));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), round_bf16_bits_avx2(u, mask));
  }
  for (; i < n; ++i) out[i] = round_bf16_scalar(x[i], flush);
}

__attribute__((target("avx2")))
void round_bias_bf16_avx2(const float* p, const float* b, bool per_value, float* out, int64_t n,
                          uint32_t flush) {
  __m256i mask = _mm256_set1_epi32(static_cast<int>(flush));
  __m256 bias = _mm256_set1_ps(*b);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i u = round_bf16_bits_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)), mask);
    __m256 s = _mm256_add_ps(_mm256_castsi256_ps(u), per_value ? _mm256_loadu_ps(b + i) : bias);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        round_bf16_bits_avx2(_mm256_castps_si256(s), mask));
  }
  for (; i < n; ++i)
    out[i] = round_bf16_scalar(round_bf16_scalar(p[i], flush) + b[per_value ? i : 0], flush);
}

bool has_avx2_f16c() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return yes;
}

// --- one contiguous run ---------------------------------------------------------------------

struct Rounding {
  bool half;         // float16, else bfloat16
  uint32_t flush;    // bfloat16: the mask a flushed subnormal keeps (0x80000000: its sign)
};

void round_run(const Rounding& how, const float* x, float* out, int64_t n) {
  if (has_avx2_f16c()) {
    if (how.half) round_half_avx2(x, out, n); else round_bf16_avx2(x, out, n, how.flush);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    out[i] = how.half ? round_half_scalar(x[i]) : round_bf16_scalar(x[i], how.flush);
}

void round_bias_run(const Rounding& how, const float* p, const float* b, bool per_value,
                    float* out, int64_t n) {
  if (has_avx2_f16c()) {
    if (how.half) round_bias_half_avx2(p, b, per_value, out, n);
    else round_bias_bf16_avx2(p, b, per_value, out, n, how.flush);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float bias = b[per_value ? i : 0];
    out[i] = how.half ? round_half_scalar(round_half_scalar(p[i]) + bias)
                      : round_bf16_scalar(round_bf16_scalar(p[i], how.flush) + bias, how.flush);
  }
}

// --- attributes, shapes, types --------------------------------------------------------------

bool read_rounding(const Attrs& attrs, Rounding* how) {
  auto dtype = attrs.find("dtype");
  if (dtype == attrs.end() || (dtype->second != "float16" && dtype->second != "bfloat16")) {
    MX_ERROR_MSG << "mxnet_amp rounding op: attribute dtype must be 'float16' or 'bfloat16'";
    return false;
  }
  how->half = dtype->second == "float16";
  auto flush = attrs.find("flush_sign");
  std::string f = flush == attrs.end() ? "0" : flush->second;
  if (f != "0" && f != "1") {
    MX_ERROR_MSG << "mxnet_amp rounding op: attribute flush_sign must be 0 or 1, got " << f;
    return false;
  }
  how->flush = f == "1" ? 0x80000000u : 0u;
  return true;
}

MXReturnValue parse_round(const Attrs& attrs, int* num_in, int* num_out) {
  Rounding how;
  *num_in = 1;
  *num_out = 1;
  return read_rounding(attrs, &how) ? MX_SUCCESS : MX_FAIL;
}

MXReturnValue parse_round_bias(const Attrs& attrs, int* num_in, int* num_out) {
  Rounding how;
  *num_in = 2;
  *num_out = 1;
  return read_rounding(attrs, &how) ? MX_SUCCESS : MX_FAIL;
}

MXReturnValue infer_type(const Attrs& attrs, std::vector<int>* in_types, std::vector<int>* out_types) {
  for (size_t i = 0; i < in_types->size(); ++i) {
    if (in_types->at(i) != -1 && in_types->at(i) != kFloat32) {
      MX_ERROR_MSG << "mxnet_amp rounding op: input " << i << " must be float32";
      return MX_FAIL;
    }
    in_types->at(i) = kFloat32;
  }
  out_types->at(0) = kFloat32;
  return MX_SUCCESS;
}

MXReturnValue infer_shape(const Attrs& attrs, std::vector<std::vector<unsigned int>>* in_shapes,
                          std::vector<std::vector<unsigned int>>* out_shapes) {
  out_shapes->at(0) = in_shapes->at(0);
  return MX_SUCCESS;
}

// the bias's one axis of more than one value, aligned to the product's shape from the right
// (numpy broadcasting): outer runs x channels x inner values; false where b does not fit
bool bias_layout(const std::vector<int64_t>& p, const std::vector<int64_t>& b,
                 int64_t* outer, int64_t* channels, int64_t* inner) {
  if (b.size() > p.size()) return false;
  size_t offset = p.size() - b.size();
  int axis = -1;
  for (size_t k = 0; k < b.size(); ++k) {
    if (b[k] == 1) continue;
    if (axis != -1 || b[k] != p[offset + k]) return false;
    axis = static_cast<int>(offset + k);
  }
  *outer = 1; *channels = 1; *inner = 1;
  for (size_t k = 0; k < p.size(); ++k) {
    int64_t d = p[k];
    if (axis == -1 || static_cast<int>(k) > axis) *inner *= d;
    else if (static_cast<int>(k) == axis) *channels = d;
    else *outer *= d;
  }
  return true;
}

// --- forward ------------------------------------------------------------------------------

// runs of at least this many values are split between threads (below it the threads' start
// costs more than they save)
const int64_t kChunk = 1 << 16;

MXReturnValue forward_round(const Attrs& attrs, std::vector<MXTensor>* inputs,
                            std::vector<MXTensor>* outputs, const OpResource& res) {
  Rounding how;
  if (!read_rounding(attrs, &how)) return MX_FAIL;
  const float* x = inputs->at(0).data<float>();
  float* out = outputs->at(0).data<float>();
  int64_t n = inputs->at(0).size();
  int64_t pieces = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (pieces > 1)
  for (int64_t c = 0; c < pieces; ++c) {
    int64_t start = c * kChunk, stop = start + kChunk < n ? start + kChunk : n;
    round_run(how, x + start, out + start, stop - start);
  }
  return MX_SUCCESS;
}

MXReturnValue forward_round_bias(const Attrs& attrs, std::vector<MXTensor>* inputs,
                                 std::vector<MXTensor>* outputs, const OpResource& res) {
  Rounding how;
  if (!read_rounding(attrs, &how)) return MX_FAIL;
  int64_t outer, channels, inner;
  if (!bias_layout(inputs->at(0).shape, inputs->at(1).shape, &outer, &channels, &inner)) {
    MX_ERROR_MSG << "mxnet_amp_round_bias: the bias does not broadcast along one axis of the product";
    return MX_FAIL;
  }
  const float* p = inputs->at(0).data<float>();
  const float* b = inputs->at(1).data<float>();
  float* out = outputs->at(0).data<float>();
  int64_t rows = outer * channels;
  if (inner == 1) {   // the bias along the last axis (dense layers): a row at a time
#pragma omp parallel for schedule(static) if (rows > kChunk)
    for (int64_t o = 0; o < outer; ++o)
      round_bias_run(how, p + o * channels, b, true, out + o * channels, channels);
    return MX_SUCCESS;
  }
#pragma omp parallel for schedule(static) if (rows * inner > kChunk)
  for (int64_t r = 0; r < rows; ++r)
    round_bias_run(how, p + r * inner, b + r % channels, false, out + r * inner, inner);
  return MX_SUCCESS;
}

// backward: a straight-through gradient, as the round trip's casts pass theirs (the
// emulation only runs forward; CachedOp asks every op for a gradient as it builds)
MXReturnValue backward_round(const Attrs& attrs, std::vector<MXTensor>* inputs,
                             std::vector<MXTensor>* outputs, const OpResource& res) {
  // inputs: the output's gradient, x, the output; outputs: x's gradient
  std::memcpy(outputs->at(0).data<float>(), inputs->at(0).data<float>(),
              sizeof(float) * inputs->at(0).size());
  return MX_SUCCESS;
}

MXReturnValue backward_round_bias(const Attrs& attrs, std::vector<MXTensor>* inputs,
                                  std::vector<MXTensor>* outputs, const OpResource& res) {
  // inputs: the output's gradient, p, b, the output; outputs: p's and b's gradients
  int64_t outer, channels, inner;
  if (!bias_layout(inputs->at(1).shape, inputs->at(2).shape, &outer, &channels, &inner)) {
    MX_ERROR_MSG << "mxnet_amp_round_bias: the bias does not broadcast along one axis of the product";
    return MX_FAIL;
  }
  const float* g = inputs->at(0).data<float>();
  std::memcpy(outputs->at(0).data<float>(), g, sizeof(float) * inputs->at(0).size());
  float* gb = outputs->at(1).data<float>();
  for (int64_t c = 0; c < channels; ++c) gb[c] = 0.0f;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t k = 0; k < inner; ++k) gb[c] += g[(o * channels + c) * inner + k];
  return MX_SUCCESS;
}

}  // namespace

// the scalar rounding (what runs where the CPU has no AVX2 + F16C), for the tests to compare
// with the vectorised one on this CPU: n values of x rounded to float16 (half != 0) or
// bfloat16 into out
extern "C" void mxnet_amp_round_scalar(const float* x, float* out, int64_t n, int half, int flush_sign) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = half ? round_half_scalar(x[i]) : round_bf16_scalar(x[i], flush_sign ? 0x80000000u : 0u);
}

// whether the vectorised path runs on this CPU
extern "C" int mxnet_amp_round_vectorised() { return has_avx2_f16c() ? 1 : 0; }

REGISTER_OP(mxnet_amp_round)
.setParseAttrs(parse_round)
.setInferType(infer_type)
.setInferShape(infer_shape)
.setForward(forward_round, "cpu")
.setBackward(backward_round, "cpu");

REGISTER_OP(mxnet_amp_round_bias)
.setParseAttrs(parse_round_bias)
.setInferType(infer_type)
.setInferShape(infer_shape)
.setForward(forward_round_bias, "cpu")
.setBackward(backward_round_bias, "cpu");

MXReturnValue initialize(int version) {
  return version >= 10900 ? MX_SUCCESS : MX_FAIL;
}
