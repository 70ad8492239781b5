import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport

/// OpenBLAS (Debian's libopenblas0), loaded with `dlopen` the first time a matrix product needs it.
///
/// Earshot does not link OpenBLAS: on CPUs with AVX2 + FMA (x86-64) and on aarch64, YAMNet's products run in our own
/// packed kernels (`GEMMKernel`), and the daemon without custom heads never calls OpenBLAS. Linked, it cost the daemon
/// about 2.5 MB of resident memory (its code, libgfortran, libquadmath) and a thread per core started before `main`,
/// for nothing. It is still what computes YAMNet's products on x86-64 CPUs without AVX2 (and with
/// `EARSHOT_KERNEL=baseline`), the classifier heads' dense layers and head training.
///
/// Callers that need it call ``require(for:)`` once where failing is allowed (loading a model or a head), so that a
/// missing library is one clear error there; ``sgemm`` may then be called from any thread.
package enum OpenBLAS {
    /// The shared object's name, as Debian's libopenblas0 installs it (through update-alternatives).
    package static let sonameCandidates = ["libopenblas.so.0", "libopenblas.so"]

    /// Values of the CBLAS enums (`CBLAS_ORDER`, `CBLAS_TRANSPOSE` in cblas.h, fixed by the CBLAS standard).
    package static let rowMajor: Int32 = 101
    package static let noTranspose: Int32 = 111
    package static let transpose: Int32 = 112

    package typealias SGEMM = @convention(c) (
        Int32, Int32, Int32, Int32, Int32, Int32, Float, UnsafePointer<Float>?, Int32, UnsafePointer<Float>?, Int32,
        Float, UnsafeMutablePointer<Float>?, Int32
    ) -> Void
    package typealias SetThreads = @convention(c) (Int32) -> Void

    package struct Library: @unchecked Sendable {
        package let sgemm: SGEMM
        package let setThreads: SetThreads
    }

    /// Thread count asked for before the library was loaded (0: leave OpenBLAS's default).
    private static let requestedThreads = Atomic<Int>(0)

    /// The library, loaded on first access (Swift runs a static's initialiser once, thread-safely).
    package static let loaded: Result<Library, EarshotError> = {
        var lastError = "not found"
        for name in sonameCandidates {
            guard let handle = dlopen(name, RTLD_NOW | RTLD_LOCAL) else {
                lastError = dlerror().map { String(cString: $0) } ?? "not found"
                continue
            }
            guard let sgemm = dlsym(handle, "cblas_sgemm"), let set = dlsym(handle, "openblas_set_num_threads") else {
                return .failure(EarshotError(.unavailable, "\(name) lacks cblas_sgemm or openblas_set_num_threads: reinstall libopenblas0 (apt-get install --reinstall libopenblas0)"))
            }
            let library = Library(
                sgemm: unsafeBitCast(sgemm, to: SGEMM.self), setThreads: unsafeBitCast(set, to: SetThreads.self))
            // Flag first, then read the request: a `setThreads` racing with this either is seen here or sees the flag.
            didLoad.store(true, ordering: .sequentiallyConsistent)
            let threads = requestedThreads.load(ordering: .sequentiallyConsistent)
            if threads > 0 { library.setThreads(Int32(threads)) }
            return .success(library)
        }
        return .failure(EarshotError(.unavailable, "OpenBLAS is needed \(neededFor) but cannot be loaded: install libopenblas0 (apt-get install libopenblas0)", cause: lastError))
    }()

    /// What the library is used for on this machine, for the error text.
    private static var neededFor: String {
        GEMMKernel.current == .openBLAS ? "on this CPU (no AVX2 + FMA) and for classifier heads" : "for classifier heads"
    }

    /// Loads the library if needed.
    /// - Parameter what: what needs it, for the error (e.g. "the model in /usr/share/earshot/yamnet").
    /// - Throws: ``EarshotError`` `.unavailable` naming `what` and the package to install when it cannot be loaded.
    package static func require(for what: String) throws(EarshotError) {
        if case .failure(var error) = loaded {
            error.message = "\(what): \(error.message)"
            throw error
        }
    }

    /// The loaded library.
    /// - Precondition: ``require(for:)`` succeeded earlier in the process.
    package static var library: Library {
        switch loaded {
        case .success(let library): return library
        case .failure(let error): preconditionFailure("OpenBLAS used without OpenBLAS.require: \(error.message)")
        }
    }

    /// Thread count for each product: applied now if the library is loaded, else when it loads.
    package static func setThreads(_ count: Int) {
        requestedThreads.store(max(1, count), ordering: .sequentiallyConsistent)
        if didLoad.load(ordering: .sequentiallyConsistent), case .success(let library) = loaded {
            library.setThreads(Int32(max(1, count)))
        }
    }

    /// Set once the library has been opened (so that `setThreads` does not load it).
    private static let didLoad = Atomic<Bool>(false)

    /// `C[m, n] = alpha * op(A) x op(B) + beta * C`, row-major: `cblas_sgemm(CblasRowMajor, ...)`.
    /// - Precondition: as ``library``.
    package static func sgemm(
        transposeA: Bool, transposeB: Bool, m: Int, n: Int, k: Int, alpha: Float, a: UnsafePointer<Float>, lda: Int,
        b: UnsafePointer<Float>, ldb: Int, beta: Float, c: UnsafeMutablePointer<Float>, ldc: Int
    ) {
        library.sgemm(
            rowMajor, transposeA ? transpose : noTranspose, transposeB ? transpose : noTranspose,
            Int32(m), Int32(n), Int32(k), alpha, a, Int32(lda), b, Int32(ldb), beta, c, Int32(ldc))
    }
}
