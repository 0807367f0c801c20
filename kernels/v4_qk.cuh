// v4's int8 S = Q.K^T (kernels/v4.cu; included by v3.cu inside namespace v3 where PA_V4 is set):
// the layout of int8 Q and K in shared memory, their wgmma descriptors, the int8 wgmma, Q's
// rounding to int8 (docs: the "q-int8-row" contract) and S's conversion to fp32.
//
// Layout. An int8 operand of wgmma must be K-major (head dimension contiguous), which is how the
// cache stores K. A row of Q or K is D bytes: at D = 128 one 128-byte row of the 128-byte swizzle
// (8 rows form a 1024-byte atom; 16-byte chunk c of row r sits at chunk c ^ (r & 7)); at D = 64
// one 64-byte row of the 64-byte swizzle (8 rows form a 512-byte atom; chunk c of row r sits at
// chunk c ^ ((r >> 1) & 3)). Either way the hardware applies the XOR to address bits [4:6] (or
// [4:5]) with bits [7:9] (or [7:8]), so every region starts 1024-byte aligned, rows are dense
// (row r at r * D), the descriptor's base offset is 0, its stride byte offset (the next 8 rows)
// is 8 * D and its leading byte offset is unused (16). A k32 step of S moves the start address
// by 32 bytes inside the row, as v3's k16 steps do on fp16.
static_assert(PA_HEAD_DIM == 128 || PA_HEAD_DIM == 64, "v4: D is 64 or 128");
constexpr int KSTEPS8 = D / 32;                  // k32 steps of S = Q.K^T on int8
constexpr u64 SWIZZLE8 = D == 128 ? 1 : 2;       // the descriptor's layout type: 128-byte or 64-byte swizzle
__host__ __device__ constexpr int k8_off(int r, int c) {   // byte offset of 16-byte chunk c of int8 row r
    return D == 128 ? r * 128 + ((c ^ (r & 7)) << 4) : r * 64 + ((c ^ ((r >> 1) & 3)) << 4);
}
__device__ __forceinline__ u64 desc_k8(u32 addr) {
    return (u64)((addr >> 4) & 0x3FFFu) | ((u64)(16 >> 4) << 16) | ((u64)(((8 * D) >> 4) & 0x3FFF) << 32) |
           (SWIZZLE8 << 62);
}
// The producer's int8 K stores (a 16-byte chunk per lane, rows r and r+1 of a quarter warp, see
// prod_row): 8 distinct bank groups per quarter warp, as its fp16 stores in v3.
__host__ __device__ constexpr bool producer_k8_stores_conflict_free() {
    for (int pw = 0; pw < 4; ++pw)
        for (int qw = 0; qw < 4; ++qw)
            for (int i = 0; i < NI; ++i) {
                bool bank[8] = {};
                for (int l = 8 * qw; l < 8 * qw + 8; ++l) {
                    const int b = (k8_off(prod_row(pw, l, i), prod_chunk(l)) >> 4) & 7;
                    if (bank[b]) return false;
                    bank[b] = true;
                }
            }
    return true;
}
static_assert(producer_k8_stores_conflict_free(), "v4: the producer's int8 K stores must be bank-conflict free");

template <int N>
__device__ __forceinline__ void pin(u32 (&x)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(x[i])::"memory");
}

// D[64 x 64] (+)= A[64 x 32] . B[32 x 64] in int32, A (Q) and B (K) int8 from shared memory, both
// K-major (the only layout of 8-bit wgmma). The accumulator fragment is that of the fp32 m64n64:
// element 4j+e of lane (g, t) of warp w: row 16w + g + 8*(e>>1), key 8j + 2t + (e&1).
__device__ __forceinline__ void wgmma_ss_s8_n64(u32 (&d)[32], u64 desc_a, u64 desc_b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
// S_i32[64 x 64] = Q_i8 . K_i8^T of one tile: KSTEPS8 k32 steps, not waited for (dq: this
// warpgroup's 64 rows of Q, dk: the tile's K; k-step kk starts 32*kk bytes into the rows).
__device__ __forceinline__ void issue_s8(u32 (&si)[S_REGS], u64 dq, u64 dk) {
#pragma unroll
    for (int kk = 0; kk < KSTEPS8; ++kk) wgmma_ss_s8_n64(si, dq + 2 * kk, dk + 2 * kk, kk > 0);
}

// Q rows r0 .. r0+63 of this warpgroup, as v3 loads them (qv: fp16 chunk idx = tid + 128*i is
// chunk idx % (D/8) of row r0 + idx / (D/8), zero for rows without a query), rounded to int8 with
// one fp32 scale a row ("q-int8-row"): amax = max |q| (exact), q_scale = amax / 127 and inv =
// 127 / amax (one IEEE division each), q_i8 = clamp(rint(q * inv), -127, 127) (one rounded
// multiply, cvt.rni); amax = 0: q_scale = 1, q_i8 = 0. A row's D/8 chunks lie in D/8 consecutive
// lanes of one warp (an aligned group), so its maximum is a shuffle reduction there. Writes the
// int8 rows into q8 (k8_off layout; two fp16 chunks make one int8 chunk: 8 bytes a thread) and
// each row's q_scale into qs[row].
template <int N>
__device__ __forceinline__ void quantise_q(const uint4 (&qv)[N], unsigned char* q8, float* qs, int r0, int tid) {
    constexpr int CH = D / 8;                // fp16 chunks of a row
    static_assert(CH <= 32 && 128 % CH == 0, "a row's chunks in one warp");
#pragma unroll
    for (int i = 0; i < N; ++i) {
        const u32 w[4] = {qv[i].x, qv[i].y, qv[i].z, qv[i].w};
        float f[8];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 x = __half22float2(pa::u32_as_half2(w[e]));
            f[2 * e] = x.x;
            f[2 * e + 1] = x.y;
        }
        float amax = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(f[e]));
#pragma unroll
        for (int sh = 1; sh < CH; sh *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, sh));
        const float scale = amax == 0.f ? 1.f : __fdiv_rn(amax, 127.f);
        const float inv = amax == 0.f ? 0.f : __fdiv_rn(127.f, amax);
        u32 packed[2] = {0u, 0u};
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int q = min(max(__float2int_rn(__fmul_rn(f[e], inv)), -127), 127);
            packed[e >> 2] |= (static_cast<u32>(q) & 0xFFu) << (8 * (e & 3));
        }
        const int idx = tid + 128 * i, R = r0 + idx / CH, ch = idx % CH;
        *reinterpret_cast<uint2*>(q8 + k8_off(R, ch >> 1) + 8 * (ch & 1)) = make_uint2(packed[0], packed[1]);
        if (ch == 0) qs[R] = scale;
    }
}

// S_raw = fp32(S_i32) * q_scale of the element's row (one rounded multiply). fp32(S_i32) is exact
// without the conversion pipe: |S_i32| <= 127 * 127 * D < 2^22, so the bits 0x4B400000 + S_i32
// are the float 1.5 * 2^23 + S_i32, and subtracting 1.5 * 2^23 leaves S_i32 exactly.
__device__ __forceinline__ void s_from_i32(const u32 (&si)[S_REGS], const float (&qsc)[2], float (&s)[S_REGS]) {
    static_assert(127 * 127 * D < (1 << 22), "the magic-constant conversion is exact below 2^22");
#pragma unroll
    for (int i = 0; i < S_REGS; ++i) {
        const float x = __fsub_rn(__uint_as_float(si[i] + 0x4B400000u), 12582912.f);
        s[i] = __fmul_rn(x, qsc[(i >> 1) & 1]);
    }
}
