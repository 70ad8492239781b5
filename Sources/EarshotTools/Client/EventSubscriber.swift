import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs
import EarshotService

/// A client of the daemon's event socket (`earshot subscribe`): connects, sends requests, reads JSON lines.
///
/// Owns one socket descriptor, closed in deinit. Not thread-safe: use from one thread.
package final class EventSubscriber {
    /// Why connecting failed, with the line a user sees and the exit status for it.
    package struct ConnectError: Error, CustomStringConvertible, Equatable, Sendable {
        /// The socket path tried.
        package var path: String
        /// The errno of socket(2) or connect(2) (0 for a bad path).
        package var errnoValue: Int32
        /// The whole line, without a program prefix, e.g. `cannot connect to /run/earshot/earshot.sock: No such file
        /// or directory (is earshotd running? see systemctl status earshotd)`, or, for the default socket missing
        /// while instances run, ``DaemonSocket/missingDefault(path:instances:)``'s line.
        package var message: String

        /// 77 (EX_NOPERM) for EACCES/EPERM, 64 (EX_USAGE) for a bad path, 69 (EX_UNAVAILABLE) otherwise.
        package var exitStatus: Int32 {
            switch errnoValue {
            case EACCES, EPERM: 77
            case 0: 64
            default: 69
            }
        }

        package var description: String { message }

        /// The error for `errnoValue` from connecting to `path`. For EACCES/EPERM, `ownerGroup` is the group that
        /// owns the socket (the hint names it; for `root` it advises sudo or the service's group `earshot`, never
        /// joining group root nor opening the socket to every user); nil looks it up from the file (or its directory).
        package init(path: String, errnoValue: Int32, ownerGroup: String? = nil) {
            self.path = path
            self.errnoValue = errnoValue
            var info = stat()
            if errnoValue == ECONNREFUSED, stat(path, &info) == 0, info.st_mode & S_IFMT != S_IFSOCK {
                // connect(2) says "refused" for a regular file too; the daemon's state is not the problem.
                let kind = info.st_mode & S_IFMT == S_IFDIR ? "a directory" : "a file"
                message = "cannot connect to \(path): it is \(kind), not a socket (give earshotd's socket, the [output] socket of its configuration, by default \(EventServer.defaultPath))"
                return
            }
            // Only instances run here (earshotd@NAME): the default socket is missing, theirs are not (trial 14 D3).
            if errnoValue == ENOENT, path == DaemonSocket.defaultPath,
               let line = DaemonSocket.missingDefault(path: path, instances: DaemonSocket.instances()) {
                message = line
                return
            }
            let text = SocketCall.describe(errnoValue)
            let hint: String
            switch errnoValue {
            case EACCES, EPERM:
                let group = ownerGroup ?? Self.owningGroup(of: path)
                if group == "root" {
                    // A daemon run as root makes its socket root's; joining group root (gid 0) would hand out far
                    // more than the socket.
                    // Never socket_mode 0666: every local account could then listen to the room (trial 13 D9).
                    hint = "the socket's group is root, which no user should join: use sudo, or run earshotd as its service (user and group earshot, as systemctl start earshotd does) and join the group earshot: sudo usermod -aG earshot $USER, then log in again"
                } else if let group {
                    hint = "join the group \"\(group)\" that owns the socket: sudo usermod -aG \(group) $USER, then log in again"
                } else {
                    hint = "join the group that owns the socket, then log in again"
                }
            default:
                hint = "is earshotd running? see systemctl status earshotd"
            }
            message = "cannot connect to \(path): \(text) (\(hint))"
        }

        package init(path: String, invalid: EarshotError) {
            self.path = path
            errnoValue = 0
            message = invalid.message
        }

        /// The name of the group owning `path`, or else its directory.
        package static func owningGroup(of path: String) -> String? {
            var info = stat()
            let directory = parentDirectory(of: path)
            guard stat(path, &info) == 0 || stat(directory.isEmpty ? "." : directory, &info) == 0 else { return nil }
            return SecretFile.groupName(info.st_gid)
        }
    }

    /// What `readLine` returned.
    package enum ReadResult: Equatable, Sendable {
        /// One line, without its newline.
        case line(String)
        /// The daemon closed the connection.
        case endOfStream
        /// No complete line arrived within the timeout.
        case timedOut
    }

    /// The path connected to.
    package let path: String
    /// The connected socket (internal so that tests can set socket options).
    package let fd: Int32
    /// Received bytes; `buffer[head...]` is not yet returned, `buffer[head..<scanned]` holds no newline.
    private var buffer: [UInt8] = []
    private var head = 0
    private var scanned = 0
    private var atEnd = false

    /// The longest line accepted from the daemon (1 MiB); a longer one is returned in pieces of this size.
    package static let maxLineBytes = 1 << 20

    /// Connects to the socket at `path` (blocking, as a local connect is immediate).
    ///
    /// - Throws: `ConnectError` naming the path and the cause, with a hint: missing socket or refused connection
    ///   (is earshotd running?), permission denied (join the owning group), or an invalid path.
    package init(path: String) throws(ConnectError) {
        let address: UnixSocketAddress
        do {
            address = try UnixSocketAddress(path: path)
        } catch {
            throw ConnectError(path: path, invalid: error)
        }
        let fd = SocketCall.makeStreamSocket(nonBlocking: false)
        guard fd >= 0 else { throw ConnectError(path: path, errnoValue: errno) }
        let result = SocketCall.connect(fd, to: address)
        guard result == 0 else {
            SocketCall.close(fd)
            throw ConnectError(path: path, errnoValue: result)
        }
        self.path = path
        self.fd = fd
    }

    deinit {
        SocketCall.close(fd)
    }

    /// Sends one request line (a newline is appended).
    ///
    /// - Throws: `EarshotError(.io)` when the daemon closed the connection or the write failed.
    package func send(line: String) throws(EarshotError) {
        let bytes = Array((line + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            let sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if sent >= 0 {
                offset += sent
            } else if errno != EINTR {
                throw .posix(.io, "cannot send to \(path)", errno: errno)
            }
        }
    }

    /// Sends `{"subscribe":[...]}` for `groups` (every group when empty), with `"id"` when `id` is given (the
    /// daemon's reply carries it back).
    package func subscribe(groups: [String], id: Int? = nil) throws(EarshotError) {
        var request: JSONObject = ["subscribe": .array(groups.map { .string($0) })]
        if let id { request["id"] = .int(id) }
        try send(line: request.encoded)
    }

    /// Reads the next line.
    ///
    /// - Parameter timeoutSeconds: how long to wait for a complete line; nil waits as long as it takes.
    /// - Throws: `EarshotError(.io)` when reading fails (other than the daemon closing the connection).
    package func readLine(timeoutSeconds: Double? = nil) throws(EarshotError) -> ReadResult {
        let deadline = timeoutSeconds.map { DispatchTime.now().uptimeNanoseconds + UInt64(max(0, $0) * 1e9) }
        while true {
            if let newline = buffer[scanned...].firstIndex(of: UInt8(ascii: "\n")) {
                return .line(take(upTo: newline, skip: 1))
            }
            scanned = buffer.count
            if buffer.count - head >= Self.maxLineBytes { return .line(take(upTo: head + Self.maxLineBytes, skip: 0)) }
            if atEnd {
                return head == buffer.count ? .endOfStream : .line(take(upTo: buffer.count, skip: 0))
            }
            if let deadline {
                let now = DispatchTime.now().uptimeNanoseconds
                guard now < deadline else { return .timedOut }
                var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let milliseconds = Int32(min(Double(deadline - now) / 1e6 + 1, Double(Int32.max)))
                let ready = poll(&poller, 1, milliseconds)
                if ready < 0, errno != EINTR { throw .posix(.io, "cannot wait for data from \(path)", errno: errno) }
                if ready <= 0 { continue }
            }
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                buffer += chunk[0..<count]
            } else if count == 0 {
                atEnd = true
            } else if errno == ECONNRESET {
                atEnd = true
            } else if errno != EINTR {
                throw .posix(.io, "cannot read from \(path)", errno: errno)
            }
        }
    }

    /// The next line `accepts` takes, skipping the others, e.g. the events and health lines a new client receives
    /// before the reply to its request. Nil when no line came within `timeoutSeconds` of the last one read, or the
    /// connection ended.
    /// - Throws: those of ``readLine(timeoutSeconds:)``.
    package func nextLine(timeoutSeconds: Double, where accepts: (String) -> Bool) throws(EarshotError) -> String? {
        while case .line(let line) = try readLine(timeoutSeconds: timeoutSeconds) {
            if accepts(line) { return line }
        }
        return nil
    }

    /// Returns `buffer[head..<end]` as text and moves `head` past it and `skip` more bytes (the newline).
    private func take(upTo end: Int, skip: Int) -> String {
        let line = String(decoding: buffer[head..<end], as: UTF8.self)
        head = min(buffer.count, end + skip)
        scanned = head
        if head == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            head = 0
            scanned = 0
        } else if head >= 64 * 1024 {
            buffer.removeFirst(head)
            scanned -= head
            head = 0
        }
        return line
    }
}
