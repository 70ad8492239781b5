import FoundationEssentials
import Glibc
import Dispatch
internal import EarshotKernels
internal import EarshotKernelsAVX512
import EarshotSupport

// Matrix products of the pointwise (1x1) convolutions and the dense layer: C[M, N] = act(A[M, K] x W[K, N] + bias).
//
// Why not only `cblas_sgemm`: in YAMNet most of the arithmetic sits in layers with few rows (M = 24 or 6 output
// positions per patch) and many weights (K x N up to 1024 x 1024). OpenBLAS re-packs the whole weight matrix on every
// call, which costs more than the product itself at M = 6 (10 GMAC/s there, against 57 for the kernel below on the
// same core). Here the weights are packed once, when the model loads, into column panels laid out in the order the
// kernel reads them, and bias + ReLU are applied as the tile is stored.
//
// The kernels pay off only where the compiler may use the CPU's vector and fused multiply-add instructions:
// - aarch64 (NEON, FMA in the base ISA): the 6 x (4 vectors) tile below, in Swift SIMD types, always.
// - x86-64: the default target is the 2003 baseline (SSE2, no FMA), where such code is slower than OpenBLAS's
//   run-time-dispatched kernels. So the 6 x 16 tile (and AVX2 copies of the convolutions) live in their own
//   module, EarshotKernels, in C with each function compiled for x86-64-v3 (`__attribute__((target(...)))`: AVX2,
//   FMA; Swift has no per-function target, and a module-wide `-target-cpu` is an unsafe flag, which SwiftPM
//   refuses in a versioned dependency); `GEMMKernel.current` picks it at run time where /proc/cpuinfo lists those
//   features, and OpenBLAS (`cblas_sgemm` on unpacked weights, convolutions with SSE) elsewhere. One binary runs
//   on every x86-64 CPU. Where the CPU also has AVX-512 (F, CD, BW, DQ, VL), the products use the 6 x 64 tile of
//   EarshotKernelsAVX512 (C, compiled for AVX-512 likewise) instead: the same sums in the same order, so the same
//   results, with fewer loads and instructions per multiply-add (figures in README, Performance); the
//   convolutions stay AVX2.
// - builds made with `-target-cpu` (e.g. `native`) and `-D EARSHOT_NATIVE_CPU` also get the 6 x 64 tile below
//   (AVX-512 wide) and keep whichever of the two tiles is faster on the machine.
// `EARSHOT_KERNEL=baseline` in the environment forces OpenBLAS on x86-64 (to compare, or to rule the kernel out),
// `EARSHOT_KERNEL=avx2` the AVX2 tile on an AVX-512 CPU; `auto` or nothing chooses as above; another value is
// reported on stderr and ignored.

/// Which code computes the matrix products in this process.
package enum GEMMKernel: Sendable {
    /// `PackedWeights.kernel6` with `KernelVector` (aarch64, or x86-64 built with EARSHOT_NATIVE_CPU).
    case wide
    /// EarshotKernels' AVX2 + FMA 6 x 16 tile over 16-wide panels.
    case avx2
    /// EarshotKernelsAVX512's 6 x 64 tile over 64-wide panels (the convolutions as with `avx2`).
    case avx512
    /// `cblas_sgemm` on row-major weights.
    case openBLAS

    /// Chosen once per process (see the file comment).
    package static let current: GEMMKernel = {
        #if arch(arm64)
        return .wide
        #elseif arch(x86_64)
        let forced = ProcessInfo.processInfo.environment["EARSHOT_KERNEL"]
        if forced == "baseline" { return .openBLAS }
        if let forced, !forced.isEmpty, !["auto", "avx2"].contains(forced) {
            let line = "earshot: EARSHOT_KERNEL=\(forced) is not recognised (use baseline, avx2 or auto); using auto\n"
            _ = line.withCString { write(STDERR_FILENO, $0, strlen($0)) }
        }
        guard X86Features.hasAVX2AndFMA else { return .openBLAS }
        #if EARSHOT_NATIVE_CPU
        return PackedWeights.narrowTileIsFaster ? .avx2 : .wide
        #else
        return X86Features.hasAVX512 && forced != "avx2" ? .avx512 : .avx2
        #endif
        #else
        return .openBLAS
        #endif
    }()
}

/// CPU features of an x86-64 machine, as the kernel reports them (it drops AVX flags where it does not save the
/// AVX registers, so "listed" also means "usable").
package enum X86Features {
    /// Whether the first `flags` line of /proc/cpuinfo lists every feature of the x86-64-v3 level EarshotKernels'
    /// functions are compiled for (`__attribute__((target(...)))`): AVX, AVX2, FMA, BMI1, BMI2, F16C, MOVBE, LZCNT
    /// (`abm`); false when it cannot be read.
    package static let hasAVX2AndFMA: Bool = ["avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe", "abm"].allSatisfy(flags.contains)

    /// Whether the CPU also has the AVX-512 subsets EarshotKernelsAVX512's functions are compiled for
    /// (`__attribute__((target(...)))`): F, CD, BW, DQ, VL (with everything `hasAVX2AndFMA` asks for).
    package static let hasAVX512: Bool = hasAVX2AndFMA
        && ["avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"].allSatisfy(flags.contains)

    /// The first `flags` line of /proc/cpuinfo (empty when it cannot be read).
    private static let flags: Set<String> = {
        guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("flags") }) else { return [] }
        return Set(line.split(separator: " ").map(String.init))
    }()
}

/// True when the matrix products use packed weights and a SIMD kernel of ours (see the file comment).
package var packedKernelAvailable: Bool { GEMMKernel.current != .openBLAS }

#if arch(arm64) || arch(arm)
/// One SIMD register on NEON (128 bits).
package typealias KernelVector = SIMD4<Float>
#elseif EARSHOT_NATIVE_CPU
/// One AVX-512 register (two with AVX2).
package typealias KernelVector = SIMD16<Float>
#else
/// One SSE register: the x86-64 baseline has 16 of them, too few for wider vectors in the depthwise loops.
package typealias KernelVector = SIMD4<Float>
#endif

/// `acc + a * b`, fused into one rounding where the target has FMA (compiled for it); separate otherwise, because
/// without FMA in the target `addingProduct` becomes a libm call per lane.
@inline(__always)
package func multiplyAdd(_ acc: KernelVector, _ a: KernelVector, _ b: KernelVector) -> KernelVector {
    #if arch(arm64) || EARSHOT_NATIVE_CPU
    acc.addingProduct(a, b)
    #else
    acc + a * b
    #endif
}

/// `max(v, 0)` lane by lane (`pointwiseMax` is not specialised for SIMD16 and runs a scalar loop).
@inline(__always)
package func relu(_ v: KernelVector) -> KernelVector {
    v.replacing(with: 0, where: v .< 0)
}

/// Float storage aligned to 64 bytes (one cache line, one AVX-512 register): its own allocation, or a slice of a
/// `WeightArena` that it keeps alive.
package final class AlignedFloats: @unchecked Sendable {
    package let pointer: UnsafeMutablePointer<Float>
    package let count: Int
    private let arena: WeightArena?

    /// `count` zeros.
    package init(count: Int) {
        self.count = count
        let raw = UnsafeMutableRawPointer.allocate(byteCount: max(1, count) * MemoryLayout<Float>.stride, alignment: 64)
        pointer = raw.initializeMemory(as: Float.self, repeating: 0, count: max(1, count))
        arena = nil
    }

    /// `count` zeros taken from `arena`.
    package init(count: Int, arena: WeightArena) {
        self.count = count
        pointer = arena.take(count)
        self.arena = arena
    }

    /// A copy of `values`.
    package convenience init(_ values: some Collection<Float>) {
        self.init(count: values.count)
        for (index, value) in values.enumerated() { pointer[index] = value }
    }

    deinit {
        if arena == nil { UnsafeMutableRawPointer(pointer).deallocate() }
    }
}

/// One allocation for all the packed weights (about 15 MB), aligned to 2 MB and offered to the kernel for
/// transparent huge pages (`madvise(MADV_HUGEPAGE)`). A patch streams every weight once, mostly from DRAM (they do
/// not stay in a shared L3 between patches), and with 4 KB pages that means about 3,700 TLB misses and a hardware
/// prefetcher that stops at every page boundary; measured on an AMD EPYC (Zen 4): 1.44-1.65 ms per patch with 4 KB
/// pages, 1.41-1.44 ms with huge pages. Only the whole 2 MB pages inside the weights are offered (a huge page is
/// resident whole once touched); the tail past the last one, under 2 MB, stays in 4 KB pages, so the weights take
/// their own size in memory (about 14.9 MB rather than 16). Best effort: without THP the memory works the same.
package final class WeightArena: @unchecked Sendable {
    package static let hugePage = 2 << 20
    private let base: UnsafeMutableRawPointer
    private let byteCount: Int
    private var used = 0

    /// Room for `floats` floats in slices of 64-byte-aligned blocks. The corresponding C function is `madvise`.
    package init(floats: Int) {
        let page = 4096
        byteCount = max(page, (floats * MemoryLayout<Float>.stride + page - 1) / page * page)
        base = UnsafeMutableRawPointer.allocate(byteCount: byteCount, alignment: Self.hugePage)
        #if os(Linux)
        let hugeBytes = byteCount / Self.hugePage * Self.hugePage
        if hugeBytes > 0 { _ = madvise(base, hugeBytes, Int32(MADV_HUGEPAGE)) }
        #endif
    }

    /// The next `count` floats, zeroed, 64-byte aligned.
    /// - Precondition: the arena has room (sized by `PackedWeights.arenaFloats`).
    package func take(_ count: Int) -> UnsafeMutablePointer<Float> {
        let start = (used + 63) / 64 * 64
        precondition(start + max(1, count) * MemoryLayout<Float>.stride <= byteCount, "weight arena too small")
        used = start + max(1, count) * MemoryLayout<Float>.stride
        return (base + start).initializeMemory(as: Float.self, repeating: 0, count: max(1, count))
    }

    deinit {
        base.deallocate()
    }
}

/// What the product's store applies after adding the bias.
package enum GEMMActivation {
    case none
    case relu
}

/// A `[K, N]` weight matrix with its `[N]` bias, packed once for `multiply`.
///
/// Packed layout (with the SIMD kernel): `ceil(N / panelWidth)` panels, each `[K, panelWidth]` row-major (the
/// columns `panel * panelWidth ..< (panel + 1) * panelWidth` of W), zero-padded past N; the bias is zero-padded the
/// same way. Without the kernel, W is kept row-major for `cblas_sgemm`.
///
/// - Important: Immutable after `init`; safe to share across threads.
package struct PackedWeights: Sendable {
    /// Rows of the tile the kernel computes at once.
    package static let tileRows = 6
    /// Columns of one panel for `kernel`: 16 with the AVX2 kernel (two 8-float vectors), otherwise four
    /// `KernelVector`s (16 on NEON, 64 with AVX-512 in a native build); 1 (unused) with OpenBLAS.
    package static func panelWidth(_ kernel: GEMMKernel) -> Int {
        switch kernel {
        case .avx2: 16
        case .avx512: 64
        case .wide: 4 * KernelVector.scalarCount
        case .openBLAS: 1
        }
    }

    /// The code that computes this product.
    package let kernel: GEMMKernel
    /// `panelWidth(kernel)`.
    package let width: Int

    package let inputs: Int
    package let outputs: Int
    package let paddedOutputs: Int
    private let storage: AlignedFloats
    private let bias: AlignedFloats

    /// Packs `weights` (`[inputs, outputs]` row-major) and `bias` (`[outputs]`); `transform(k, n, value)` may change each
    /// weight on the way (batch-norm folding).
    package init(
        inputs: Int, outputs: Int, weights: UnsafeBufferPointer<Float>, bias: [Float], arena: WeightArena,
        kernel: GEMMKernel = .current, transform: (_ k: Int, _ n: Int, _ value: Float) -> Float = { $2 }
    ) {
        precondition(weights.count == inputs * outputs && bias.count == outputs)
        self.inputs = inputs
        self.outputs = outputs
        self.kernel = kernel
        width = Self.panelWidth(kernel)
        if kernel != .openBLAS {
            let panels = (outputs + width - 1) / width
            paddedOutputs = panels * width
            storage = AlignedFloats(count: panels * inputs * width, arena: arena)
            let packed = storage.pointer
            for k in 0..<inputs {
                for n in 0..<outputs {
                    let panel = n / width
                    packed[(panel * inputs + k) * width + n % width] = transform(k, n, weights[k * outputs + n])
                }
            }
        } else {
            paddedOutputs = outputs
            storage = AlignedFloats(count: inputs * outputs, arena: arena)
            for k in 0..<inputs {
                for n in 0..<outputs { storage.pointer[k * outputs + n] = transform(k, n, weights[k * outputs + n]) }
            }
        }
        self.bias = AlignedFloats(count: paddedOutputs, arena: arena)
        for n in 0..<outputs { self.bias.pointer[n] = bias[n] }
    }

    /// Floats (with alignment padding) a `[inputs, outputs]` matrix and its bias take in a `WeightArena`.
    package static func arenaFloats(inputs: Int, outputs: Int, kernel: GEMMKernel) -> Int {
        let width = panelWidth(kernel)
        let padded = (outputs + width - 1) / width * width
        return inputs * padded + padded + 32
    }

    /// Floats `multiply` needs in `scratch` for `rows` rows.
    package func scratchCount(rows: Int) -> Int {
        kernel != .openBLAS ? Self.tileRows * width : rows * outputs
    }

    /// Bytes of packed weights and bias.
    package var byteCount: Int { (storage.count + bias.count) * MemoryLayout<Float>.stride }

    /// `output[m, n] = activation(sum_k input[m, k] * W[k, n] + bias[n])` for `rows` rows.
    /// - Parameters:
    ///   - input: `[rows, inputs]`, rows `inputStride` floats apart.
    ///   - output: where row `m` goes (`[outputs]` floats from `output.row(m)`); with the SIMD kernel and `outputs`
    ///     not a multiple of `panelWidth`, the last panel is stored through `scratch`.
    ///   - scratch: `scratchCount(rows:)` floats: one tile with the SIMD kernel (for a partial last panel); with
    ///     OpenBLAS, `rows * outputs` for a bordered output (the product lands there before it is scattered).
    package func multiply(
        _ input: UnsafePointer<Float>, rows: Int, inputStride: Int, into output: GEMMOutput,
        activation: GEMMActivation, scratch: UnsafeMutablePointer<Float>
    ) {
        multiply(GEMMRows(input: input, count: rows, output: output), inputStride: inputStride, activation: activation,
                 scratch: scratch)
    }

    /// The product for two blocks of rows at once (`first`, then `second`), as if they were one: with the SIMD
    /// kernel, a register tile may take its rows from both, so two short blocks cost what one block of their total
    /// size does (a block's last rows alone would each take a pass over the weights of their own). Each row's sums
    /// are the same whichever tile computes it.
    package func multiply(
        _ first: GEMMRows, _ second: GEMMRows = GEMMRows(), inputStride: Int, activation: GEMMActivation,
        scratch: UnsafeMutablePointer<Float>
    ) {
        guard first.count + second.count > 0 else { return }
        switch kernel {
        case .wide:
            #if arch(arm64) || EARSHOT_NATIVE_CPU
            panels(first, second, inputStride: inputStride, activation: activation, scratch: scratch,
                   tile: Self.kernel6, row: Self.kernel1)
            #else
            preconditionFailure("the wide kernel is not compiled into this build")
            #endif
        case .avx2:
            #if arch(x86_64)
            panels(first, second, inputStride: inputStride, activation: activation, scratch: scratch,
                   tile: gemmTile6x16, row: gemmRow16)
            #else
            preconditionFailure("the AVX2 kernel exists on x86-64 only")
            #endif
        case .avx512:
            #if arch(x86_64)
            panels(first, second, inputStride: inputStride, activation: activation, scratch: scratch,
                   tile: gemmTile6x64, row: gemmRow64)
            #else
            preconditionFailure("the AVX-512 kernel exists on x86-64 only")
            #endif
        case .openBLAS:
            for block in [first, second] where block.count > 0 {
                multiplyWithBLAS(block.input, rows: block.count, inputStride: inputStride, into: block.output,
                                 activation: activation, scratch: scratch)
            }
        }
    }

    /// A 6-row register tile: six input rows `k` deep, one panel and its bias, six output rows, ReLU.
    package typealias Tile = (
        _ r0: UnsafePointer<Float>, _ r1: UnsafePointer<Float>, _ r2: UnsafePointer<Float>,
        _ r3: UnsafePointer<Float>, _ r4: UnsafePointer<Float>, _ r5: UnsafePointer<Float>, _ k: Int,
        _ panel: UnsafePointer<Float>, _ bias: UnsafePointer<Float>,
        _ o0: UnsafeMutablePointer<Float>, _ o1: UnsafeMutablePointer<Float>, _ o2: UnsafeMutablePointer<Float>,
        _ o3: UnsafeMutablePointer<Float>, _ o4: UnsafeMutablePointer<Float>, _ o5: UnsafeMutablePointer<Float>,
        _ applyReLU: Bool
    ) -> Void
    /// One row across one panel, summed in the tile's order.
    package typealias Row = (
        _ a: UnsafePointer<Float>, _ k: Int, _ panel: UnsafePointer<Float>, _ bias: UnsafePointer<Float>,
        _ out: UnsafeMutablePointer<Float>, _ applyReLU: Bool
    ) -> Void

    /// The product over packed panels with the given kernels. Panel-outer: one panel (`[inputs, width]`, at most
    /// 256 KB) stays in L2 while every row tile passes over it. Rows are numbered through `first`, then `second`.
    @inline(__always)
    private func panels(
        _ first: GEMMRows, _ second: GEMMRows, inputStride: Int, activation: GEMMActivation,
        scratch: UnsafeMutablePointer<Float>, tile: Tile, row kernelRow: Row
    ) {
        let panels = paddedOutputs / width
        let relu = activation == .relu
        let rows = first.count + second.count
        @inline(__always) func input(_ m: Int) -> UnsafePointer<Float> {
            m < first.count ? first.input + m * inputStride : second.input + (m - first.count) * inputStride
        }
        @inline(__always) func output(_ m: Int) -> UnsafeMutablePointer<Float> {
            m < first.count ? first.output.row(m) : second.output.row(m - first.count)
        }
        for panel in 0..<panels {
            let weights = storage.pointer + panel * inputs * width
            let panelBias = bias.pointer + panel * width
            let column = panel * width
            let columns = min(width, outputs - column)
            var row = 0
            if columns == width {
                while row + Self.tileRows <= rows {
                    tile(
                        input(row), input(row + 1), input(row + 2), input(row + 3), input(row + 4), input(row + 5),
                        inputs, weights, panelBias,
                        output(row) + column, output(row + 1) + column, output(row + 2) + column,
                        output(row + 3) + column, output(row + 4) + column, output(row + 5) + column, relu)
                    row += Self.tileRows
                }
                if rows - row >= 2 {
                    // Two to five rows left: one more tile, its missing rows repeating the last real one into
                    // `scratch` (discarded). A row alone costs about two thirds of a tile (its two accumulator
                    // chains wait on the multiply-add latency), so this is cheaper from two rows on; the real
                    // rows' sums are the same either way.
                    let last = rows - 1
                    @inline(__always) func padded(_ i: Int) -> UnsafePointer<Float> { input(min(row + i, last)) }
                    @inline(__always) func target(_ i: Int) -> UnsafeMutablePointer<Float> {
                        row + i <= last ? output(row + i) + column : scratch
                    }
                    tile(
                        padded(0), padded(1), padded(2), padded(3), padded(4), padded(5), inputs, weights, panelBias,
                        target(0), target(1), target(2), target(3), target(4), target(5), relu)
                    row = rows
                }
                while row < rows {
                    kernelRow(input(row), inputs, weights, panelBias, output(row) + column, relu)
                    row += 1
                }
            } else {
                while row < rows {
                    kernelRow(input(row), inputs, weights, panelBias, scratch, relu)
                    (output(row) + column).update(from: scratch, count: columns)
                    row += 1
                }
            }
        }
    }

    /// The product with OpenBLAS on row-major weights.
    private func multiplyWithBLAS(
        _ input: UnsafePointer<Float>, rows: Int, inputStride: Int, into output: GEMMOutput,
        activation: GEMMActivation, scratch: UnsafeMutablePointer<Float>
    ) {
        // One call for all rows (OpenBLAS packs the weights again on every call), then bias, activation and, for a
        // bordered output, the scatter into place.
        let dense: UnsafeMutablePointer<Float>
        let denseStride: Int
        if case .dense(let stride) = output.layout {
            dense = output.base
            denseStride = stride
        } else {
            dense = scratch
            denseStride = outputs
        }
        OpenBLAS.sgemm(
            transposeA: false, transposeB: false, m: rows, n: outputs, k: inputs, alpha: 1, a: input, lda: inputStride,
            b: storage.pointer, ldb: outputs, beta: 0, c: dense, ldc: denseStride)
        for r in 0..<rows {
            let source = dense + r * denseStride
            let line = output.row(r)
            switch activation {
            case .none: for n in 0..<outputs { line[n] = source[n] + bias.pointer[n] }
            case .relu: for n in 0..<outputs { line[n] = max(source[n] + bias.pointer[n], 0) }
            }
        }
    }

    #if arch(arm64) || EARSHOT_NATIVE_CPU
    /// The 6 x (4 vectors) register tile: 24 accumulators, 4 weight vectors loaded and 6 input values broadcast per
    /// step of k (from the six input rows), then bias (+ ReLU) and one store per output row.
    @inline(never)
    private static func kernel6(
        _ r0: UnsafePointer<Float>, _ r1: UnsafePointer<Float>, _ r2: UnsafePointer<Float>,
        _ r3: UnsafePointer<Float>, _ r4: UnsafePointer<Float>, _ r5: UnsafePointer<Float>, _ k: Int,
        _ panel: UnsafePointer<Float>, _ bias: UnsafePointer<Float>,
        _ o0: UnsafeMutablePointer<Float>, _ o1: UnsafeMutablePointer<Float>, _ o2: UnsafeMutablePointer<Float>,
        _ o3: UnsafeMutablePointer<Float>, _ o4: UnsafeMutablePointer<Float>, _ o5: UnsafeMutablePointer<Float>,
        _ applyReLU: Bool
    ) {
        typealias V = KernelVector
        let step = MemoryLayout<V>.stride
        var c00 = V(), c01 = V(), c02 = V(), c03 = V()
        var c10 = V(), c11 = V(), c12 = V(), c13 = V()
        var c20 = V(), c21 = V(), c22 = V(), c23 = V()
        var c30 = V(), c31 = V(), c32 = V(), c33 = V()
        var c40 = V(), c41 = V(), c42 = V(), c43 = V()
        var c50 = V(), c51 = V(), c52 = V(), c53 = V()
        var b = UnsafeRawPointer(panel)
        for index in 0..<k {
            let b0 = b.load(as: V.self)
            let b1 = b.load(fromByteOffset: step, as: V.self)
            let b2 = b.load(fromByteOffset: 2 * step, as: V.self)
            let b3 = b.load(fromByteOffset: 3 * step, as: V.self)
            b += 4 * step
            var x = V(repeating: r0[index])
            c00 = multiplyAdd(c00, x, b0); c01 = multiplyAdd(c01, x, b1)
            c02 = multiplyAdd(c02, x, b2); c03 = multiplyAdd(c03, x, b3)
            x = V(repeating: r1[index])
            c10 = multiplyAdd(c10, x, b0); c11 = multiplyAdd(c11, x, b1)
            c12 = multiplyAdd(c12, x, b2); c13 = multiplyAdd(c13, x, b3)
            x = V(repeating: r2[index])
            c20 = multiplyAdd(c20, x, b0); c21 = multiplyAdd(c21, x, b1)
            c22 = multiplyAdd(c22, x, b2); c23 = multiplyAdd(c23, x, b3)
            x = V(repeating: r3[index])
            c30 = multiplyAdd(c30, x, b0); c31 = multiplyAdd(c31, x, b1)
            c32 = multiplyAdd(c32, x, b2); c33 = multiplyAdd(c33, x, b3)
            x = V(repeating: r4[index])
            c40 = multiplyAdd(c40, x, b0); c41 = multiplyAdd(c41, x, b1)
            c42 = multiplyAdd(c42, x, b2); c43 = multiplyAdd(c43, x, b3)
            x = V(repeating: r5[index])
            c50 = multiplyAdd(c50, x, b0); c51 = multiplyAdd(c51, x, b1)
            c52 = multiplyAdd(c52, x, b2); c53 = multiplyAdd(c53, x, b3)
        }
        let z = UnsafeRawPointer(bias)
        let z0 = z.load(as: V.self), z1 = z.load(fromByteOffset: step, as: V.self)
        let z2 = z.load(fromByteOffset: 2 * step, as: V.self), z3 = z.load(fromByteOffset: 3 * step, as: V.self)
        store(o0, c00 + z0, c01 + z1, c02 + z2, c03 + z3, applyReLU)
        store(o1, c10 + z0, c11 + z1, c12 + z2, c13 + z3, applyReLU)
        store(o2, c20 + z0, c21 + z1, c22 + z2, c23 + z3, applyReLU)
        store(o3, c30 + z0, c31 + z1, c32 + z2, c33 + z3, applyReLU)
        store(o4, c40 + z0, c41 + z1, c42 + z2, c43 + z3, applyReLU)
        store(o5, c50 + z0, c51 + z1, c52 + z2, c53 + z3, applyReLU)
    }

    #if arch(x86_64)
    /// Whether EarshotKernels' 6 x 16 AVX2 tile beats the 6 x 64 one of a native build here. The wide tile needs
    /// 28 vector registers: right for AVX-512 (32), but code built for AVX2 only (16 registers) spills and runs at
    /// half speed. Swift cannot test the target's features at compile time, so both are timed once, on first use
    /// (about 1 ms); they compute the same sums in the same order, so the choice changes no result.
    package static let narrowTileIsFaster: Bool = {
        let m = 24, k = 256, columns = 128
        let a = AlignedFloats(count: m * k), b = AlignedFloats(count: k * columns), bias = AlignedFloats(count: columns)
        let c = AlignedFloats(count: m * columns)
        for index in 0..<a.count { a.pointer[index] = Float(index % 13) * 0.01 }
        for index in 0..<b.count { b.pointer[index] = Float(index % 7) * 0.01 }
        func time(width: Int, _ tile: Tile) -> Double {
            var best = Double.infinity
            for _ in 0..<5 {
                let start = DispatchTime.now().uptimeNanoseconds
                for panel in 0..<(columns / width) {
                    for row in stride(from: 0, to: m, by: 6) {
                        let o = (0..<6).map { c.pointer + (row + $0) * columns + panel * width }
                        let r = (0..<6).map { UnsafePointer(a.pointer + (row + $0) * k) }
                        tile(r[0], r[1], r[2], r[3], r[4], r[5], k, b.pointer + panel * k * width,
                             bias.pointer + panel * width, o[0], o[1], o[2], o[3], o[4], o[5], true)
                    }
                }
                best = min(best, Double(DispatchTime.now().uptimeNanoseconds - start))
            }
            return best
        }
        let wide = { time(width: 4 * KernelVector.scalarCount, kernel6) }
        let narrow = { time(width: 16, gemmTile6x16) }
        _ = wide()
        return narrow() < 0.9 * wide()
    }()
    #endif

    /// One row across one panel (a matrix-vector product), summed in exactly the order `kernel6` sums each of its
    /// rows, so a row's result does not depend on which kernel computed it (on how patches were batched).
    @inline(never)
    private static func kernel1(
        _ a: UnsafePointer<Float>, _ k: Int, _ panel: UnsafePointer<Float>, _ bias: UnsafePointer<Float>,
        _ out: UnsafeMutablePointer<Float>, _ applyReLU: Bool
    ) {
        typealias V = KernelVector
        let step = MemoryLayout<V>.stride
        var c0 = V(), c1 = V(), c2 = V(), c3 = V()
        var b = UnsafeRawPointer(panel)
        for index in 0..<k {
            let x = V(repeating: a[index])
            c0 = multiplyAdd(c0, x, b.load(as: V.self))
            c1 = multiplyAdd(c1, x, b.load(fromByteOffset: step, as: V.self))
            c2 = multiplyAdd(c2, x, b.load(fromByteOffset: 2 * step, as: V.self))
            c3 = multiplyAdd(c3, x, b.load(fromByteOffset: 3 * step, as: V.self))
            b += 4 * step
        }
        let z = UnsafeRawPointer(bias)
        store(out, c0 + z.load(as: V.self), c1 + z.load(fromByteOffset: step, as: V.self),
              c2 + z.load(fromByteOffset: 2 * step, as: V.self), c3 + z.load(fromByteOffset: 3 * step, as: V.self),
              applyReLU)
    }

    /// Stores one tile row of four vectors, after ReLU when asked.
    @inline(__always)
    private static func store(
        _ out: UnsafeMutablePointer<Float>, _ v0: KernelVector, _ v1: KernelVector, _ v2: KernelVector,
        _ v3: KernelVector, _ applyReLU: Bool
    ) {
        let raw = UnsafeMutableRawPointer(out), step = MemoryLayout<KernelVector>.stride
        if applyReLU {
            raw.storeBytes(of: relu(v0), as: KernelVector.self)
            raw.storeBytes(of: relu(v1), toByteOffset: step, as: KernelVector.self)
            raw.storeBytes(of: relu(v2), toByteOffset: 2 * step, as: KernelVector.self)
            raw.storeBytes(of: relu(v3), toByteOffset: 3 * step, as: KernelVector.self)
        } else {
            raw.storeBytes(of: v0, as: KernelVector.self)
            raw.storeBytes(of: v1, toByteOffset: step, as: KernelVector.self)
            raw.storeBytes(of: v2, toByteOffset: 2 * step, as: KernelVector.self)
            raw.storeBytes(of: v3, toByteOffset: 3 * step, as: KernelVector.self)
        }
    }
    #endif
}

/// A block of rows of a product: `count` input rows from `input` (rows `inputStride` apart, as the call says), and
/// where their results go.
package struct GEMMRows {
    package var input: UnsafePointer<Float>
    package var count: Int
    package var output: GEMMOutput

    package init(input: UnsafePointer<Float>, count: Int, output: GEMMOutput) {
        self.input = input
        self.count = count
        self.output = output
    }

    /// No rows.
    package init() {
        let none = UnsafeMutablePointer<Float>(bitPattern: MemoryLayout<Float>.alignment)!
        self.init(input: none, count: 0, output: GEMMOutput(base: none, layout: .dense(stride: 0)))
    }
}

/// Where the rows of a product go: a dense matrix, or the interior of zero-bordered NHWC images (the layout the
/// next depthwise convolution reads, so it needs no bounds checks).
package struct GEMMOutput {
    package enum Layout {
        /// Row `m` at `base + m * stride`.
        case dense(stride: Int)
        /// Row `m` is position `m % (height * width)` of image `m / (height * width)`; each image is
        /// `[height + 2, width + 2, channels]` with a one-position border.
        case bordered(height: Int, width: Int, channels: Int)
    }

    package let base: UnsafeMutablePointer<Float>
    package let layout: Layout

    @inline(__always)
    package func row(_ m: Int) -> UnsafeMutablePointer<Float> {
        switch layout {
        case .dense(let stride):
            return base + m * stride
        case .bordered(let height, let width, let channels):
            let positions = height * width
            let image = m / positions, position = m - image * positions
            let y = position / width, x = position - y * width
            return base + ((image * (height + 2) + y + 1) * (width + 2) + x + 1) * channels
        }
    }
}
