import Foundation
import Glibc
import Testing
import EarshotSupport
import EarshotOutputs

/// Clients that hold the metrics port without finishing a request (audit 13 #1), and descriptors past select(2)'s
/// 1024 (audit 13 #9): a real earshotd, real TCP connections from the test.
@Suite("MetricsSlowClients: a scrape gets through whatever other clients of the metrics port do", .serialized)
struct MetricsSlowClientTests {
    /// A TCP connection to 127.0.0.1:`port` that has sent the start of a request and adds one header line per
    /// ``trickle()``, never finishing it.
    final class SlowClient {
        let descriptor: Int32
        /// The daemon has closed the connection (end of stream, or a send that failed).
        private(set) var closedByServer = false

        init(port: Int) throws {
            descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            let connected = descriptor >= 0 && HTTPGet.connectToLoopback(descriptor, port: port)
            try #require(connected, "connect: \(String(cString: strerror(errno)))")
            send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        }

        /// One more header line, unless the daemon has closed the connection (which this notes).
        func trickle() {
            guard !closedByServer else { return }
            var byte: UInt8 = 0
            let peeked = recv(descriptor, &byte, 1, Int32(MSG_DONTWAIT | MSG_PEEK))
            if peeked >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK) {
                closedByServer = true  // end of stream, a reset, or an answer to a request it never finished
                return
            }
            send("X-Slow: 1\r\n")
        }

        private func send(_ text: String) {
            let bytes = Array(text.utf8)
            if bytes.withUnsafeBytes({ Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) != bytes.count {
                closedByServer = true
            }
        }

        deinit { close(descriptor) }
    }

    @Test("24 clients that send a header line every second and never finish their request: a scrape while they hold the port gets 200 and the exposition; the daemon closes every one of them while they trickle, and a scrape after gets 200",
          .needsEarshotdBuilt)
    func slowClients() throws {
        let port = try FreePort.pick()
        let scratch = try DaemonScratch(["[metrics]", "enabled = true", "listen = 127.0.0.1:\(port)"])
        defer { scratch.remove() }
        let daemon = try DaemonProcess(["--config", scratch.config.path, "--input", "-"], standardInput: true)
        #expect(TestWait.until(seconds: 30) { HTTPGet.fetch(port: port)?.status == 200 }, "\(daemon.errorText)")
        // More than the 16 connections kept: before the fix 16 such clients kept every scrape out for good.
        let clients = try (0..<24).map { _ in try SlowClient(port: port) }
        for client in clients { client.trickle() }
        let scrape = HTTPGet.fetch(port: port)
        #expect(scrape?.status == 200)
        #expect(scrape?.headers["content-type"] == MetricsHTTPServer.contentType)
        #expect(HTTPGet.samples(scrape?.body ?? "")["earshot_build_info{version=\"\(earshotVersion)\"}"] == "1")
        // A line a second: never idle for the 3 s of libmicrohttpd's idle timeout; each is closed by its request's
        // deadline (3 s), or earlier to make room. 60 rounds only bound a daemon that never closes them.
        for _ in 0..<60 where clients.contains(where: { !$0.closedByServer }) {
            sleep(1)
            for client in clients { client.trickle() }
        }
        #expect(clients.filter { !$0.closedByServer }.count == 0)
        #expect(HTTPGet.fetch(port: port)?.status == 200)
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 60) == 0, "\(daemon.errorText)")
    }

    /// A Python launcher that makes `descriptors` descriptors open (of /dev/null, inherited) and then runs the
    /// program given after it: a daemon with a raised LimitNOFILE and many socket clients.
    static let launcher = """
        import os, resource, sys
        wanted = int(sys.argv[1])
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
        while True:
            fd = os.open("/dev/null", os.O_RDONLY)
            os.set_inheritable(fd, True)
            if fd >= wanted:
                break
        os.execv(sys.argv[2], sys.argv[2:])
        """

    static var launcherUsable: Bool {
        var limit = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit)
        return FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") && limit.rlim_max >= 2048
    }

    @Test("earshotd with 1100 descriptors open: the metrics server starts and a scrape gets 200 (libmicrohttpd polls with poll, not select, which cannot watch 1024 and more)",
          .needsEarshotdBuilt,
          .enabled(if: launcherUsable, "needs /usr/bin/python3 and a hard RLIMIT_NOFILE of 2048 or more, to start earshotd with 1100 descriptors open"))
    func descriptorsPast1024() throws {
        let port = try FreePort.pick()
        let scratch = try DaemonScratch(["[metrics]", "enabled = true", "listen = 127.0.0.1:\(port)"])
        defer { scratch.remove() }
        let earshotd = try #require(EarshotdRun.executable)
        let daemon = try DaemonProcess(
            ["-c", Self.launcher, "1100", earshotd.path, "--config", scratch.config.path, "--input", "-"],
            standardInput: true, program: URL(fileURLWithPath: "/usr/bin/python3"))
        #expect(TestWait.until(seconds: 30) { HTTPGet.fetch(port: port)?.status == 200 }, "\(daemon.errorText)")
        // Every number up to 1100 was taken before earshotd started: its listening socket and the scrape's
        // connection are above 1024.
        let open = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(daemon.process.processIdentifier)/fd")
        #expect(open.count > 1100, "\(open.count)")
        let scrape = HTTPGet.fetch(port: port)
        #expect(scrape?.status == 200)
        #expect(HTTPGet.samples(scrape?.body ?? "")["earshot_build_info{version=\"\(earshotVersion)\"}"] == "1")
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 60) == 0, "\(daemon.errorText)")
    }
}
