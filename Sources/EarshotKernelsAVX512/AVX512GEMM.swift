// The inner loops of YAMNet's matrix products compiled for AVX-512 (`-target-cpu skylake-avx512`: AVX-512 F, CD,
// BW, DQ, VL on top of x86-64-v3; Intel Skylake-SP / Ice Lake and later, AMD Zen 4 and later).
// Package.swift builds this module alone with that target on x86-64 hosts; Earshot calls in here only where
// /proc/cpuinfo lists those features (`GEMMKernel.current` in Sources/Earshot/Model/PackedGEMM.swift). Nothing here
// may be called on a CPU without them.
//
// Why a second tile: with 32 vector registers of 16 floats, a 6 x 64 tile keeps 24 accumulators and loads 4 weight
// vectors and broadcasts 6 inputs per 24 multiply-adds (the AVX2 6 x 16 tile: 2 and 6 per 12), so fewer loads and
// instructions per multiply-add. Measured on an AMD EPYC (Zen 4, whose 512-bit units do the work of two 256-bit
// ones: the same peak) with whole-network batches: see README, Performance.
//
// Layout the callers must provide (see `PackedWeights` in the Earshot module): weights packed into panels of 64
// columns, `[k, 64]` row-major per panel (unaligned loads are used); the panel's bias as 64 floats; six input rows of
// `k` floats anywhere; each output row 64 writable floats. Every sum is taken over k in order with one fused
// multiply-add per step, then the bias, then ReLU: the same arithmetic, in the same order, as the AVX2 tile, so the
// two give identical results.

#if arch(x86_64)
/// Columns of one packed weight panel used by `gemmTile6x64` and `gemmRow64`.
public let avx512PanelWidth = 64

/// `o_r[n] = act(sum_k a_r[k] * panel[k * 64 + n] + bias[n])` for rows r = 0...5 and n = 0..<64: a 6 x 64 register
/// tile (24 accumulators of 16 floats).
/// - Parameters:
///   - r0...r5: the six input rows, `k` floats each.
///   - panel: `[k, 64]` weights; `bias`: 64 floats.
///   - o0...o5: the six output rows, 64 floats each.
@inline(never)
public func gemmTile6x64(
    _ r0: UnsafePointer<Float>, _ r1: UnsafePointer<Float>, _ r2: UnsafePointer<Float>, _ r3: UnsafePointer<Float>,
    _ r4: UnsafePointer<Float>, _ r5: UnsafePointer<Float>, _ k: Int, _ panel: UnsafePointer<Float>,
    _ bias: UnsafePointer<Float>,
    _ o0: UnsafeMutablePointer<Float>, _ o1: UnsafeMutablePointer<Float>, _ o2: UnsafeMutablePointer<Float>,
    _ o3: UnsafeMutablePointer<Float>, _ o4: UnsafeMutablePointer<Float>, _ o5: UnsafeMutablePointer<Float>,
    _ applyReLU: Bool
) {
    typealias V = SIMD16<Float>
    let step = MemoryLayout<V>.stride
    @inline(__always) func fma(_ acc: V, _ x: V, _ w: V) -> V { acc.addingProduct(x, w) }
    var c00 = V(), c01 = V(), c02 = V(), c03 = V()
    var c10 = V(), c11 = V(), c12 = V(), c13 = V()
    var c20 = V(), c21 = V(), c22 = V(), c23 = V()
    var c30 = V(), c31 = V(), c32 = V(), c33 = V()
    var c40 = V(), c41 = V(), c42 = V(), c43 = V()
    var c50 = V(), c51 = V(), c52 = V(), c53 = V()
    var b = UnsafeRawPointer(panel)
    for index in 0..<k {
        let b0 = b.loadUnaligned(as: V.self), b1 = b.loadUnaligned(fromByteOffset: step, as: V.self)
        let b2 = b.loadUnaligned(fromByteOffset: 2 * step, as: V.self)
        let b3 = b.loadUnaligned(fromByteOffset: 3 * step, as: V.self)
        b += 4 * step
        var x = V(repeating: r0[index])
        c00 = fma(c00, x, b0); c01 = fma(c01, x, b1); c02 = fma(c02, x, b2); c03 = fma(c03, x, b3)
        x = V(repeating: r1[index])
        c10 = fma(c10, x, b0); c11 = fma(c11, x, b1); c12 = fma(c12, x, b2); c13 = fma(c13, x, b3)
        x = V(repeating: r2[index])
        c20 = fma(c20, x, b0); c21 = fma(c21, x, b1); c22 = fma(c22, x, b2); c23 = fma(c23, x, b3)
        x = V(repeating: r3[index])
        c30 = fma(c30, x, b0); c31 = fma(c31, x, b1); c32 = fma(c32, x, b2); c33 = fma(c33, x, b3)
        x = V(repeating: r4[index])
        c40 = fma(c40, x, b0); c41 = fma(c41, x, b1); c42 = fma(c42, x, b2); c43 = fma(c43, x, b3)
        x = V(repeating: r5[index])
        c50 = fma(c50, x, b0); c51 = fma(c51, x, b1); c52 = fma(c52, x, b2); c53 = fma(c53, x, b3)
    }
    let z = UnsafeRawPointer(bias)
    let z0 = z.loadUnaligned(as: V.self), z1 = z.loadUnaligned(fromByteOffset: step, as: V.self)
    let z2 = z.loadUnaligned(fromByteOffset: 2 * step, as: V.self)
    let z3 = z.loadUnaligned(fromByteOffset: 3 * step, as: V.self)
    store(o0, c00 + z0, c01 + z1, c02 + z2, c03 + z3, applyReLU)
    store(o1, c10 + z0, c11 + z1, c12 + z2, c13 + z3, applyReLU)
    store(o2, c20 + z0, c21 + z1, c22 + z2, c23 + z3, applyReLU)
    store(o3, c30 + z0, c31 + z1, c32 + z2, c33 + z3, applyReLU)
    store(o4, c40 + z0, c41 + z1, c42 + z2, c43 + z3, applyReLU)
    store(o5, c50 + z0, c51 + z1, c52 + z2, c53 + z3, applyReLU)
}

/// One row of `gemmTile6x64` (a matrix-vector product over one panel), summed in exactly the same order.
/// - Parameters: as `gemmTile6x64`, for the single row `a` (`k` floats) into `out` (64 floats).
@inline(never)
public func gemmRow64(
    _ a: UnsafePointer<Float>, _ k: Int, _ panel: UnsafePointer<Float>, _ bias: UnsafePointer<Float>,
    _ out: UnsafeMutablePointer<Float>, _ applyReLU: Bool
) {
    typealias V = SIMD16<Float>
    let step = MemoryLayout<V>.stride
    var c0 = V(), c1 = V(), c2 = V(), c3 = V()
    var b = UnsafeRawPointer(panel)
    for index in 0..<k {
        let x = V(repeating: a[index])
        c0 = c0.addingProduct(x, b.loadUnaligned(as: V.self))
        c1 = c1.addingProduct(x, b.loadUnaligned(fromByteOffset: step, as: V.self))
        c2 = c2.addingProduct(x, b.loadUnaligned(fromByteOffset: 2 * step, as: V.self))
        c3 = c3.addingProduct(x, b.loadUnaligned(fromByteOffset: 3 * step, as: V.self))
        b += 4 * step
    }
    let z = UnsafeRawPointer(bias)
    store(out, c0 + z.loadUnaligned(as: V.self), c1 + z.loadUnaligned(fromByteOffset: step, as: V.self),
          c2 + z.loadUnaligned(fromByteOffset: 2 * step, as: V.self),
          c3 + z.loadUnaligned(fromByteOffset: 3 * step, as: V.self), applyReLU)
}

/// Stores one row of four vectors, after ReLU when asked.
@inline(__always)
private func store(
    _ out: UnsafeMutablePointer<Float>, _ v0: SIMD16<Float>, _ v1: SIMD16<Float>, _ v2: SIMD16<Float>,
    _ v3: SIMD16<Float>, _ applyReLU: Bool
) {
    @inline(__always) func relu(_ v: SIMD16<Float>) -> SIMD16<Float> { v.replacing(with: 0, where: v .< 0) }
    let raw = UnsafeMutableRawPointer(out), step = MemoryLayout<SIMD16<Float>>.stride
    raw.storeBytes(of: applyReLU ? relu(v0) : v0, as: SIMD16<Float>.self)
    raw.storeBytes(of: applyReLU ? relu(v1) : v1, toByteOffset: step, as: SIMD16<Float>.self)
    raw.storeBytes(of: applyReLU ? relu(v2) : v2, toByteOffset: 2 * step, as: SIMD16<Float>.self)
    raw.storeBytes(of: applyReLU ? relu(v3) : v3, toByteOffset: 3 * step, as: SIMD16<Float>.self)
}
#endif
