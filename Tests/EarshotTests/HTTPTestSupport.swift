import Foundation
import Glibc
import Synchronization

/// A small HTTP/1.1 server on 127.0.0.1 and a free port, for the notification tests: it records every request
/// (method, path, headers, body, when it arrived) and answers each with what `answer` says for its index (status,
/// seconds to wait first). One connection per request (`Connection: close`), unless an answer keeps the connection
/// open for the next request (``Answer/keepAlive``) or closes it without answering (``Answer/closeWithoutAnswer``).
/// Stopped by ``stop()``. `HEAD` requests (the notify sink's reachability checks) are kept apart (``checks``),
/// answered 200 at once, and take no index: the answers and counts of the notifications stay as they were.
final class HTTPTestServer: @unchecked Sendable {
    struct Request: Sendable {
        var method: String
        var path: String
        /// Header names lowercased, in order.
        var headers: [(name: String, value: String)]
        var body: String
        /// Monotonic seconds (`DispatchTime`) when the request was read in full.
        var receivedAt: Double

        func header(_ name: String) -> String? { headers.first { $0.name == name.lowercased() }?.value }
    }

    struct Answer: Sendable {
        var status: Int
        var delaySeconds: Double = 0
        /// Extra `Name: value` lines of the answer (e.g. `Retry-After: 1`).
        var headers: [String] = []
        /// Answers without `Connection: close` and reads the next request on the same connection.
        var keepAlive = false
        /// Reads the request, then closes the connection without an answer (a proxy or server that drops it).
        var closeWithoutAnswer = false
    }

    let port: Int
    private let listener: Int32
    private let answer: @Sendable (Int, Request) -> Answer
    private let recorded = Mutex<[Request]>([])
    private let recordedChecks = Mutex<[Request]>([])
    private let answered = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)
    private let done = DispatchGroup()

    struct ServerError: Error, CustomStringConvertible {
        var description: String
    }

    convenience init(answer: @escaping @Sendable (Int) -> Answer) throws {
        try self.init(answerRequest: { index, _ in answer(index) })
    }

    /// A server that answers each request as `answerRequest` says for its index and the request itself (e.g. by
    /// its body).
    /// With `port`, on that port of 127.0.0.1 (one a test used while nothing listened on it).
    init(port wanted: Int = 0, answerRequest: @escaping @Sendable (Int, Request) -> Answer) throws {
        self.answer = answerRequest
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        self.listener = listener
        guard listener >= 0 else { throw ServerError(description: "socket: \(String(cString: strerror(errno)))") }
        var yes: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        guard let bound = FreePort.bindLoopback(listener, port: wanted), listen(listener, 16) == 0 else {
            close(listener)
            throw ServerError(description: "bind/listen on 127.0.0.1: \(String(cString: strerror(errno)))")
        }
        port = bound
        done.enter()
        // Threads of their own: blocking work on Dispatch's global queue can starve (Linux has no way to see that a
        // worker blocks, and other tests block too), which would shift the times recorded.
        Thread.detachNewThread { [self] in
            acceptLoop()
            done.leave()
        }
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    func url(_ path: String = "/") -> String { "http://127.0.0.1:\(port)\(path)" }

    var requests: [Request] { recorded.withLock { $0 } }
    /// The `HEAD` requests (reachability checks), in order.
    var checks: [Request] { recordedChecks.withLock { $0 } }
    /// Responses written (a client that gave up first still counts once its answer is due).
    var answeredCount: Int { answered.load(ordering: .relaxed) }

    /// Waits up to `timeout` seconds for at least `count` requests; returns them.
    func waitForRequests(_ count: Int, timeout: Double) -> [Request] {
        let end = Date().addingTimeInterval(timeout)
        while requests.count < count && Date() < end { usleep(10_000) }
        return requests
    }

    func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        done.wait()
        close(listener)
    }

    deinit { stop() }

    private func acceptLoop() {
        while !stopped.load(ordering: .relaxed) {
            var poller = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 50) > 0 else { continue }
            let client = accept(listener, nil, nil)
            if client < 0 { continue }
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            done.enter()
            Thread.detachNewThread { [self] in
                serve(client)
                done.leave()
            }
        }
    }

    private func serve(_ client: Int32) {
        defer { close(client) }
        var data = [UInt8]()
        while let (request, consumed) = readRequest(client, &data) {
            data.removeFirst(consumed)
            if request.method == "HEAD" {
                recordedChecks.withLock { $0.append(request) }
                let text = "HTTP/1.1 200 Test\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"
                _ = text.withCString { send(client, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
                return
            }
            let index = recorded.withLock { requests -> Int in
                requests.append(request)
                return requests.count - 1
            }
            let reply = answer(index, request)
            let until = Date().addingTimeInterval(reply.delaySeconds)
            while Date() < until, !stopped.load(ordering: .relaxed) { usleep(10_000) }
            if reply.closeWithoutAnswer { return }
            let extra = reply.headers.map { "\($0)\r\n" }.joined()
            let connection = reply.keepAlive ? "" : "Connection: close\r\n"
            let text = "HTTP/1.1 \(reply.status) Test\r\n\(extra)Content-Length: 2\r\n\(connection)\r\nok"
            _ = text.withCString { send(client, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
            answered.wrappingAdd(1, ordering: .relaxed)
            if !reply.keepAlive { return }
        }
    }

    /// Reads one request from `client` (bytes already read in `data`); nil when the client closes first, the
    /// server stops, or 5 s pass without a whole request (a kept-alive connection: 5 s idle). Returns the request
    /// and how many bytes of `data` it took.
    private func readRequest(_ client: Int32, _ data: inout [UInt8]) -> (Request, Int)? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        var headerEnd: Int?
        var contentLength = 0
        let deadline = Date().addingTimeInterval(5)
        while true {
            if headerEnd == nil, let range = findHeaderEnd(data) {
                headerEnd = range
                let head = String(decoding: data[0..<range], as: UTF8.self)
                for line in head.split(separator: "\r\n") where line.lowercased().hasPrefix("content-length:") {
                    contentLength = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) ?? 0
                }
            }
            if let end = headerEnd, data.count >= end + contentLength { break }
            guard Date() < deadline, !stopped.load(ordering: .relaxed) else { return nil }
            var poller = pollfd(fd: client, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 50) > 0 else { continue }
            let count = read(client, &buffer, buffer.count)
            if count <= 0 { return nil }
            data += buffer[0..<count]
        }
        guard let end = headerEnd else { return nil }
        let lines = String(decoding: data[0..<(end - 4)], as: UTF8.self).components(separatedBy: "\r\n")
        let requestLine = lines.first?.split(separator: " ") ?? []
        var headers: [(String, String)] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.append((line[..<colon].lowercased(), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
        let body = String(decoding: data[end..<(end + contentLength)], as: UTF8.self)
        let request = Request(
            method: requestLine.first.map(String.init) ?? "", path: requestLine.dropFirst().first.map(String.init) ?? "",
            headers: headers, body: body, receivedAt: Double(DispatchTime.now().uptimeNanoseconds) / 1e9)
        return (request, end + contentLength)
    }

    private func findHeaderEnd(_ data: [UInt8]) -> Int? {
        guard data.count >= 4 else { return nil }
        for index in 0...(data.count - 4)
        where data[index] == 13 && data[index + 1] == 10 && data[index + 2] == 13 && data[index + 3] == 10 {
            return index + 4
        }
        return nil
    }
}
