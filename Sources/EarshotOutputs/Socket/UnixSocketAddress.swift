import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection

/// A filesystem Unix-domain socket address (`struct sockaddr_un`) for a path, shared by the event server and its
/// clients.
package struct UnixSocketAddress {
    private var storage = sockaddr_un()
    /// The length to pass to `bind`/`connect`: the path's offset plus its bytes plus the terminating NUL.
    package let length: socklen_t
    package let path: String

    /// The longest path `sun_path` holds (107 bytes on Linux, plus the NUL).
    package static var maxPathBytes: Int { MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1 }

    /// - Throws: `EarshotError(.config)` when the path is empty, contains a NUL byte, or is longer than
    ///   `maxPathBytes`.
    package init(path: String) throws(EarshotError) {
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, !bytes.contains(0) else {
            throw EarshotError(.config, "socket path \"\(path)\" is invalid (give a file path such as \(EventServer.defaultPath))")
        }
        guard bytes.count <= Self.maxPathBytes else {
            throw EarshotError(
                .config,
                "socket path \(path) is too long (\(bytes.count) bytes; Unix sockets allow at most \(Self.maxPathBytes)): choose a shorter path")
        }
        self.path = path
        storage.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &storage.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let pathOffset = MemoryLayout<sockaddr_un>.offset(of: \sockaddr_un.sun_path) ?? 2
        length = socklen_t(pathOffset + bytes.count + 1)
    }

    /// Calls `body` with the address as a `sockaddr` pointer and its length.
    package func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafePointer(to: storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }
}

/// Small wrappers for the POSIX calls the socket code makes: retry on `EINTR`, report the errno.
package enum SocketCall {
    /// A new `AF_UNIX` `SOCK_STREAM` socket with close-on-exec, optionally non-blocking; -1 with `errno` on failure.
    package static func makeStreamSocket(nonBlocking: Bool) -> Int32 {
        var type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        if nonBlocking { type |= Int32(SOCK_NONBLOCK.rawValue) }
        return socket(AF_UNIX, type, 0)
    }

    /// `connect(2)` retried on `EINTR`; returns 0 or the errno.
    package static func connect(_ fd: Int32, to address: UnixSocketAddress) -> Int32 {
        while true {
            let result = address.withSockaddr { Glibc.connect(fd, $0, $1) }
            if result == 0 { return 0 }
            if errno == EINTR { continue }
            return errno
        }
    }

    /// `close(2)`, ignoring `EINTR` (on Linux the descriptor is released even then).
    package static func close(_ fd: Int32) {
        _ = Glibc.close(fd)
    }

    /// The text of an errno value.
    package static func describe(_ code: Int32) -> String {
        String(cString: strerror(code))
    }
}
