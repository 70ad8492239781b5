// The inner loops of YAMNet's matrix products compiled for x86-64-v3 (`-target-cpu haswell`: AVX2, FMA, BMI1/2,
// F16C, MOVBE, LZCNT; Haswell and Zen onwards).
// Package.swift builds this module alone with `-target-cpu haswell` on x86-64 hosts, while the rest of Earshot keeps
// the 2003 x86-64 baseline, so one binary runs on every x86-64 CPU: Earshot reads /proc/cpuinfo once and calls in
// here only where the CPU has those features (`GEMMKernel.current` in Sources/Earshot/Model/PackedGEMM.swift);
// elsewhere it uses OpenBLAS. Nothing here may be called on a CPU without them: any instruction in this module may
// be AVX2.
//
// Layout the callers must provide (see `PackedWeights` in the Earshot module): weights packed into panels of 16
// columns, `[k, 16]` row-major per panel, 32-byte aligned or not (unaligned loads are used); the panel's bias as 16
// floats; six input rows of `k` floats anywhere; each output row 16 writable floats.

#if arch(x86_64)
/// Columns of one packed weight panel used by `gemmTile6x16` and `gemmRow16`.
public let avx2PanelWidth = 16

/// Rows of the register tile of `gemmTile6x16`.
public let avx2TileRows = 6

/// `o_r[n] = act(sum_k a_r[k] * panel[k * 16 + n] + bias[n])` for rows r = 0...5 and n = 0..<16: a 6 x 16
/// register tile (12 accumulators of 8 floats, one AVX2 register each), every sum taken over k in order with one
/// fused multiply-add per step, then the bias, then ReLU when `applyReLU`.
/// - Parameters:
///   - r0...r5: the six input rows, `k` floats each (anywhere: a tile may span two blocks of rows).
///   - panel: `[k, 16]` weights; `bias`: 16 floats.
///   - o0...o5: the six output rows, 16 floats each.
@inline(never)
public func gemmTile6x16(
    _ r0: UnsafePointer<Float>, _ r1: UnsafePointer<Float>, _ r2: UnsafePointer<Float>, _ r3: UnsafePointer<Float>,
    _ r4: UnsafePointer<Float>, _ r5: UnsafePointer<Float>, _ k: Int, _ panel: UnsafePointer<Float>,
    _ bias: UnsafePointer<Float>,
    _ o0: UnsafeMutablePointer<Float>, _ o1: UnsafeMutablePointer<Float>, _ o2: UnsafeMutablePointer<Float>,
    _ o3: UnsafeMutablePointer<Float>, _ o4: UnsafeMutablePointer<Float>, _ o5: UnsafeMutablePointer<Float>,
    _ applyReLU: Bool
) {
    typealias V = SIMD8<Float>
    @inline(__always) func fma(_ acc: V, _ x: V, _ w: V) -> V { acc.addingProduct(x, w) }
    var c00 = V(), c01 = V(), c10 = V(), c11 = V(), c20 = V(), c21 = V()
    var c30 = V(), c31 = V(), c40 = V(), c41 = V(), c50 = V(), c51 = V()
    var b = UnsafeRawPointer(panel)
    for index in 0..<k {
        let b0 = b.loadUnaligned(as: V.self), b1 = b.loadUnaligned(fromByteOffset: 32, as: V.self)
        b += 16 * MemoryLayout<Float>.stride
        var x = V(repeating: r0[index])
        c00 = fma(c00, x, b0); c01 = fma(c01, x, b1)
        x = V(repeating: r1[index])
        c10 = fma(c10, x, b0); c11 = fma(c11, x, b1)
        x = V(repeating: r2[index])
        c20 = fma(c20, x, b0); c21 = fma(c21, x, b1)
        x = V(repeating: r3[index])
        c30 = fma(c30, x, b0); c31 = fma(c31, x, b1)
        x = V(repeating: r4[index])
        c40 = fma(c40, x, b0); c41 = fma(c41, x, b1)
        x = V(repeating: r5[index])
        c50 = fma(c50, x, b0); c51 = fma(c51, x, b1)
    }
    let z = UnsafeRawPointer(bias)
    let z0 = z.loadUnaligned(as: V.self), z1 = z.loadUnaligned(fromByteOffset: 32, as: V.self)
    @inline(__always) func store(_ out: UnsafeMutablePointer<Float>, _ v0: V, _ v1: V) {
        let raw = UnsafeMutableRawPointer(out)
        let s0 = v0 + z0, s1 = v1 + z1
        raw.storeBytes(of: applyReLU ? s0.replacing(with: 0, where: s0 .< 0) : s0, as: V.self)
        raw.storeBytes(of: applyReLU ? s1.replacing(with: 0, where: s1 .< 0) : s1, toByteOffset: 32, as: V.self)
    }
    store(o0, c00, c01); store(o1, c10, c11); store(o2, c20, c21)
    store(o3, c30, c31); store(o4, c40, c41); store(o5, c50, c51)
}

/// One row of `gemmTile6x16` (a matrix-vector product over one panel), summed in exactly the same order, so a row's
/// result does not depend on which of the two computed it (on how patches were batched).
/// - Parameters: as `gemmTile6x16`, for the single row `a` (`k` floats) into `out` (16 floats).
@inline(never)
public func gemmRow16(
    _ a: UnsafePointer<Float>, _ k: Int, _ panel: UnsafePointer<Float>, _ bias: UnsafePointer<Float>,
    _ out: UnsafeMutablePointer<Float>, _ applyReLU: Bool
) {
    typealias V = SIMD8<Float>
    var c0 = V(), c1 = V()
    var b = UnsafeRawPointer(panel)
    for index in 0..<k {
        let x = V(repeating: a[index])
        c0 = c0.addingProduct(x, b.loadUnaligned(as: V.self))
        c1 = c1.addingProduct(x, b.loadUnaligned(fromByteOffset: 32, as: V.self))
        b += 16 * MemoryLayout<Float>.stride
    }
    let z = UnsafeRawPointer(bias)
    let s0 = c0 + z.loadUnaligned(as: V.self), s1 = c1 + z.loadUnaligned(fromByteOffset: 32, as: V.self)
    let raw = UnsafeMutableRawPointer(out)
    raw.storeBytes(of: applyReLU ? s0.replacing(with: 0, where: s0 .< 0) : s0, as: V.self)
    raw.storeBytes(of: applyReLU ? s1.replacing(with: 0, where: s1 .< 0) : s1, toByteOffset: 32, as: V.self)
}
#endif
