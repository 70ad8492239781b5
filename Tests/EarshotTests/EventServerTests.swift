import Foundation
import Synchronization
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// The event socket over real Unix sockets in a temporary directory.
@Suite("EventServer")
struct EventServerTests {
    typealias S = SocketTestSupport

    @Test("Commands given at creation are answered from the first connection (no register call); a status closure's error object is the reply, as it is")
    func commandsFromCreationAndAStatusError() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try EventServer(
            configuration: .init(path: path),
            status: { ["type": "error", "message": "not ready yet; try again in a moment"] },
            commands: ["ping"], commandHandler: { command, group, _, reply in reply(["type": .string(command), "group": .string(group ?? "")]) })
        defer { server.stop() }
        let client = try EventSubscriber(path: path)
        try client.send(line: #"{"cmd":"ping","group":"baby_cry"}"#)
        #expect(try client.nextReply(timeoutSeconds: S.timeout) == #"{"type":"ping","group":"baby_cry"}"#)
        try client.send(line: #"{"status":true}"#)
        #expect(try client.nextReply(timeoutSeconds: S.timeout) == #"{"type":"error","message":"not ready yet; try again in a moment"}"#)
    }

    @Test("A command whose reply is deferred (the daemon's test alert) holds only its client's later requests: another client's status and command are answered, and events published, meanwhile; then its reply and its held request come, in order; a second reply is ignored")
    func deferredReplyKeepsTheServerAnswering() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let held = Mutex<EventServer.CommandReply?>(nil)
        let server = try EventServer(
            configuration: .init(path: path), status: S.status, commands: ["hold", "ping"],
            commandHandler: { command, _, _, reply in
                if command == "hold" {
                    held.withLock { $0 = reply }
                } else {
                    reply(["type": .string(command)])
                }
            })
        defer { server.stop() }
        let waiting = try EventSubscriber(path: path)
        // One write, one batch: the ping after the held command waits for its reply.
        try waiting.send(line: #"{"cmd":"hold"}"# + "\n" + #"{"cmd":"ping"}"#)
        #expect(S.eventually { held.withLock { $0 != nil } })

        let other = try EventSubscriber(path: path)
        try other.send(line: #"{"status":true}"#)
        let status = try #require(try S.lines(other, 1).first)
        #expect(status.hasPrefix(#"{"type":"status","uptime_seconds":12.5,"device":"hw:1,0","xruns":3,"windows_analysed":1234,"subscribers":2,"#), "\(status)")
        try other.send(line: #"{"cmd":"ping"}"#)
        #expect(try S.lines(other, 1) == [#"{"type":"ping"}"#])
        let event = S.onset("smoke_alarm", "Smoke detector, smoke alarm", 0.9, 0)
        server.publish(event, time: S.wallClock)
        #expect(try S.lines(other, 1) == [S.line(event)])

        let reply = try #require(held.withLock { $0 })
        reply(["type": "held", "n": 1])
        reply(["type": "held", "n": 2])
        // The event went out while the command waited; its reply, then the ping held behind it; the second reply
        // never comes (the status below is the next line).
        #expect(try S.lines(waiting, 3) == [S.line(event), #"{"type":"held","n":1}"#, #"{"type":"ping"}"#])
        try waiting.send(line: #"{"status":true}"#)
        #expect(try S.lines(waiting, 1).first?.hasPrefix(#"{"type":"status","#) == true)
    }

    @Test("Several subscribers receive the same events, in order, as exact JSON lines")
    func fanOutInOrder() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path)
        defer { server.stop() }
        let clients = try (0..<3).map { _ in try S.subscriber(path) }

        var events: [DetectionEvent] = []
        for index in 0..<100 {
            let start = Double(index) * 10
            events.append(index % 2 == 0
                ? S.onset("smoke_alarm", "Smoke detector, smoke alarm", 0.81234, start)
                : S.offset("smoke_alarm", "Smoke detector, smoke alarm", start - 10, start - 4.24))
        }
        for event in events { server.publish(event, time: S.wallClock) }

        let expected = events.map(S.line)
        #expect(expected[0] == #"{"type":"detection","group":"smoke_alarm","class":"Smoke detector, smoke alarm","confidence":0.8123,"stream_time":0.0,"time":"2026-11-30T16:45:12.345Z"}"#)
        #expect(expected[1] == #"{"type":"detection_end","group":"smoke_alarm","class":"Smoke detector, smoke alarm","start":0.0,"end":5.76,"duration":5.76,"peak_confidence":0.91,"mean_confidence":0.72,"windows":11,"reason":"hold_elapsed","time":"2026-11-30T16:45:12.345Z"}"#)
        for client in clients {
            #expect(try S.lines(client, 100) == expected)
        }
        // (Swift may end a value's lifetime after its last use: keep the clients connected for the count.)
        withExtendedLifetime(clients) {
            let statistics = server.statistics
            #expect(statistics.eventsPublished == 100)
            #expect(statistics.subscribers == 3)
            #expect(statistics.droppedLines == 0)
        }
    }

    @Test("A group filter selects detection lines; health lines reach every client")
    func groupFilter() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path)
        defer { server.stop() }

        let smokeOnly = try EventSubscriber(path: path)
        try smokeOnly.subscribe(groups: ["smoke_alarm", "smoke_alarm"])
        #expect(try smokeOnly.readLine(timeoutSeconds: S.timeout) == .line(#"{"type":"subscribed","groups":["smoke_alarm"]}"#))
        let everything = try EventSubscriber(path: path)
        try everything.subscribe(groups: [])
        #expect(try everything.readLine(timeoutSeconds: S.timeout) == .line(#"{"type":"subscribed","groups":"all"}"#))

        let smoke = S.onset("smoke_alarm", "Smoke detector, smoke alarm", 0.9, 1)
        let baby = S.onset("baby_cry", "Baby cry, infant cry", 0.6, 2)
        let health = HealthEvent(
            state: .overrun, message: "capture buffer overran; audio lost", details: ["device": "hw:1,0", "xruns": 3])
        let smokeEnd = S.offset("smoke_alarm", "Smoke detector, smoke alarm", 1, 5)
        server.publish(smoke, time: S.wallClock)
        server.publish(baby, time: S.wallClock)
        server.publish(health, time: S.wallClock)
        server.publish(smokeEnd, time: S.wallClock)

        let healthLine = #"{"type":"health","state":"overrun","message":"capture buffer overran; audio lost","device":"hw:1,0","xruns":3,"time":"2026-11-30T16:45:12.345Z"}"#
        #expect(try S.lines(smokeOnly, 3) == [S.line(smoke), healthLine, S.line(smokeEnd)])
        #expect(try S.lines(everything, 4) == [S.line(smoke), S.line(baby), healthLine, S.line(smokeEnd)])

        // A new filter replaces the old one; "*" means every group.
        try smokeOnly.send(line: #"{"subscribe":["*"]}"#)
        #expect(try smokeOnly.readLine(timeoutSeconds: S.timeout) == .line(#"{"type":"subscribed","groups":"all"}"#))
        server.publish(baby, time: S.wallClock)
        #expect(try S.lines(smokeOnly, 1) == [S.line(baby)])
    }

    @Test("A sleep session's snore_report goes to the clients of snoring and those with no filter, not to baby_cry's")
    func snoreReportFollowsTheSnoringFilter() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path)
        let sink = SocketSink(server: server)
        defer { sink.stop() }
        let babyOnly = try S.subscriber(path, groups: ["baby_cry"])
        let snoring = try S.subscriber(path, groups: ["snoring"])
        let everything = try S.subscriber(path)
        let report: JSONObject = ["type": "snore_report", "source": "sleep session", "snoring_minutes": .number(4.84, decimals: 2), "events": 2]
        let baby = S.onset("baby_cry", "builtin_baby_cry:baby_cry", 0.99, 29.28)
        #expect(sink.accepts(.sleepReport(report)))
        sink.deliver(RoutedOutput(output: .sleepReport(report), time: S.wallClock))
        sink.deliver(RoutedOutput(output: .detection(baby), time: S.wallClock))
        let reportLine = #"{"type":"snore_report","source":"sleep session","snoring_minutes":4.84,"events":2}"#
        #expect(try S.lines(babyOnly, 1) == [S.line(baby)])
        #expect(try S.lines(snoring, 1) == [reportLine])
        #expect(try S.lines(everything, 2) == [reportLine, S.line(baby)])
        // Nothing else waits for the baby_cry client (the report was not queued behind the detection).
        #expect(try babyOnly.readLine(timeoutSeconds: 0.3) == .timedOut)
    }

    @Test("Malformed requests get an error line and the client keeps receiving events")
    func malformedRequests() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path, maxRequestLineBytes: 1024, knownGroups: ["smoke_alarm", "baby_cry"])
        defer { server.stop() }
        let client = try S.subscriber(path)

        let hint = #"(send {\"subscribe\":[\"group\",...]} or {\"status\":true})"#
        let cases: [(String, String)] = [
            ("not json", "malformed request: not valid JSON \(hint)"),
            ("[1,2]", "malformed request: expected a JSON object \(hint)"),
            (#"{"subscribe":5}"#, #"malformed request: \"subscribe\" must be a list of group names"#),
            (#"{"subscribe":["smoke_alarm",7]}"#, #"malformed request: \"subscribe\" must be a list of group names"#),
            (#"{"cmd":"reboot"}"#, #"unknown command \"reboot\" (supported: \"status\", \"listen\")"#),
            (#"{"hello":1}"#, "unknown request \(hint)"),
            (String(repeating: "[", count: 40), "malformed request: nested more than 16 levels deep \(hint)"),
            (#"{"subscribe":["smok"]}"#, #"unknown group \"smok\" in subscribe (watched groups: baby_cry, smoke_alarm)"#),
        ]
        for (request, message) in cases {
            try client.send(line: request)
            #expect(try client.readLine(timeoutSeconds: S.timeout) == .line(#"{"type":"error","message":""# + message + #""}"#))
        }
        // Blank lines and a CRLF ending are fine.
        try client.send(line: "")
        try client.send(line: "  \r")

        // A line over the limit: one error, the rest of the line ignored, the next line served.
        try client.send(line: String(repeating: "x", count: 5000) + "\n" + #"{"cmd":"status"}"#)
        #expect(try client.readLine(timeoutSeconds: S.timeout) == .line(#"{"type":"error","message":"request line longer than 1024 bytes; ignored"}"#))
        guard case .line(let status) = try client.readLine(timeoutSeconds: S.timeout) else {
            Issue.record("no status reply")
            return
        }
        #expect(status.hasPrefix(#"{"type":"status","#))

        // The unknown group left the filter as it was (all groups): events still arrive.
        let event = S.onset("baby_cry", "Baby cry, infant cry", 0.5, 3)
        server.publish(event, time: S.wallClock)
        #expect(try S.lines(client, 1) == [S.line(event)])
        withExtendedLifetime(client) { #expect(server.statistics.subscribers == 1) }
    }

    @Test("A status request returns the daemon's fields and the server's counters")
    func status() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path)
        defer { server.stop() }
        let client = try S.subscriber(path)
        server.publish(S.onset("speech", "Speech", 0.7, 0), time: S.wallClock)
        _ = try S.lines(client, 1)

        for request in [#"{"status":true}"#, #"{"cmd":"status"}"#] {
            try client.send(line: request)
            guard case .line(let line) = try client.readLine(timeoutSeconds: S.timeout) else {
                Issue.record("no status reply to \(request)")
                return
            }
            #expect(line.hasPrefix(#"{"type":"status","uptime_seconds":12.5,"device":"hw:1,0","xruns":3,"windows_analysed":1234,"subscribers":1,"events_published":1,"dropped_lines":0,"your_dropped_lines":0,"evicted_clients":0,"refused_clients":0,"time":"20"#))
            #expect(line.hasSuffix("Z\"}"))
        }
    }

    @Test("A stuck client never delays the publisher: its lines are dropped, counted, and reported when it catches up")
    func stuckClient() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path)
        defer { server.stop() }
        let healthy = try S.subscriber(path)
        // Never reads until all 10,000 events are published. (SO_RCVBUF does not bound an AF_UNIX stream: the
        // sender's buffer does, so the kernel holds about 200 KiB for it, and the server's queue 256 KiB more.)
        let stuck = try S.subscriber(path)
        defer { withExtendedLifetime((healthy, stuck)) {} }
        var small: Int32 = 4096
        #expect(setsockopt(stuck.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size)) == 0)

        let events = (0..<10_000).map { S.onset("smoke_alarm", "Smoke detector, smoke alarm", 0.5, Double($0) * 0.48) }
        let expected = events.map(S.line)
        let clock = ContinuousClock()
        var slowest = Duration.zero
        var total = Duration.zero
        var healthyLines: [String] = []
        // Batches of 100, the healthy client reading each batch before the next: its queue never nears the bound,
        // so every one of its lines must arrive.
        for batch in stride(from: 0, to: events.count, by: 100) {
            for event in events[batch..<batch + 100] {
                let took = clock.measure { server.publish(event, time: S.wallClock) }
                slowest = max(slowest, took)
                total += took
            }
            healthyLines += try S.lines(healthy, 100)
        }
        #expect(healthyLines == expected)
        let dropped = server.statistics.droppedLines
        #expect(dropped > 0)
        #expect(dropped < 10_000)
        print("stuck client: \(dropped) of 10000 lines dropped; publish took \(total / 10_000) on average, \(slowest) at most")
        #expect(total < .seconds(5))

        // The stuck client now reads: the lines that fit, in order, then one notice with the dropped count.
        let received = try S.lines(stuck, 10_000 - dropped)
        #expect(received == Array(expected.prefix(10_000 - dropped)))
        #expect(try stuck.readLine(timeoutSeconds: S.timeout) == .line(#"{"type":"dropped","count":\#(dropped)}"#))
        let after = S.onset("smoke_alarm", "Smoke detector, smoke alarm", 0.6, 99_999)
        server.publish(after, time: S.wallClock)
        #expect(try S.lines(stuck, 1) == [S.line(after)])
        #expect(try S.lines(healthy, 1) == [S.line(after)])

        try stuck.send(line: #"{"status":true}"#)
        guard case .line(let status) = try stuck.readLine(timeoutSeconds: S.timeout) else {
            Issue.record("no status reply")
            return
        }
        #expect(status.contains(#""dropped_lines":\#(dropped),"your_dropped_lines":\#(dropped),"#))
    }

    @Test("A client that disconnects while the server is writing to it is dropped without harm (no SIGPIPE)")
    func disconnectMidWrite() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path)
        defer { server.stop() }
        let healthy = try S.subscriber(path)
        // (Swift may end a value's lifetime after its last use; these clients must stay connected to the end.)
        defer { withExtendedLifetime(healthy) {} }
        var leaver: EventSubscriber? = try S.subscriber(path)

        // Fill the leaver's socket and its queue (until lines are dropped for it), then close it with data pending.
        let event = S.onset("dog_bark", "Bark", 0.5, 1)
        for _ in 0..<50 {
            for _ in 0..<100 { server.publish(event, time: S.wallClock) }
            _ = try S.lines(healthy, 100)
        }
        withExtendedLifetime(leaver) {
            #expect(server.statistics.subscribers == 2)
            #expect(server.statistics.droppedLines > 0)
        }
        leaver = nil
        for _ in 0..<100 { server.publish(event, time: S.wallClock) }
        #expect(try S.lines(healthy, 100).count == 100)
        #expect(S.eventually { server.statistics.subscribers == 1 })
    }

    @Test("A client that only shuts down its sending side keeps receiving; one that closes is dropped")
    func halfClose() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path)
        defer { server.stop() }
        let halfClosed = try S.subscriber(path, groups: ["glass_break"])
        defer { withExtendedLifetime(halfClosed) {} }
        #expect(shutdown(halfClosed.fd, Int32(SHUT_WR)) == 0)
        var closing: EventSubscriber? = try S.subscriber(path)
        withExtendedLifetime(closing) { #expect(S.eventually { server.statistics.subscribers == 2 }) }
        closing = nil
        #expect(S.eventually { server.statistics.subscribers == 1 })

        let event = S.onset("glass_break", "Shatter", 0.4, 7)
        server.publish(event, time: S.wallClock)
        #expect(try S.lines(halfClosed, 1) == [S.line(event)])
    }

    @Test("A reload that stops watching a subscribed group tells that subscriber, and only it (trial 5 #8)")
    func reloadRemovesASubscribedGroup() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path, knownGroups: ["baby_cry", "glass_break"])
        defer { server.stop() }
        let glass = try S.subscriber(path, groups: ["glass_break", "baby_cry"])
        let baby = try S.subscriber(path, groups: ["baby_cry"])
        let all = try S.subscriber(path)
        server.setKnownGroups(
            ["baby_cry"],
            unwatched: .init(names: ["glass_break"], advice: "[detection] watch in g.conf, then reload earshotd (systemctl reload earshotd)"))
        #expect(try glass.readLine(timeoutSeconds: S.timeout) == .line(#"{"type":"error","message":"the daemon no longer watches group \"glass_break\" after a reload: this subscription gets no events of it (to hear it again, add it to [detection] watch in g.conf, then reload earshotd (systemctl reload earshotd))"}"#))
        #expect(try baby.readLine(timeoutSeconds: 0.5) == .timedOut)
        #expect(try all.readLine(timeoutSeconds: 0.5) == .timedOut)
    }

    @Test("Clients beyond maxClients get an error line and are disconnected")
    func tooManyClients() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path, maxClients: 1)
        defer { server.stop() }
        let first = try S.subscriber(path)
        let second = try EventSubscriber(path: path)
        #expect(try second.readLine(timeoutSeconds: S.timeout) == .line(#"{"type":"error","message":"too many subscribers (1 connected, at most 1); try again later, or raise [output] max_clients"}"#))
        #expect(try second.readLine(timeoutSeconds: S.timeout) == .endOfStream)
        try first.send(line: #"{"status":true}"#)
        #expect(try S.lines(first, 1).first?.hasPrefix(#"{"type":"status""#) == true)
    }

    @Test("Closed connections free their slot at once: after 300 quick connect/close cycles a subscriber gets in")
    func closedClientsFreeTheirSlots() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path, maxClients: 4)
        defer { server.stop() }
        let address = try UnixSocketAddress(path: path)
        for _ in 0..<300 {
            let fd = SocketCall.makeStreamSocket(nonBlocking: false)
            #expect(SocketCall.connect(fd, to: address) == 0)
            SocketCall.close(fd)
        }
        // Clients that shut down their sending side (as `nc -U` does at the end of its input), then close: once the
        // server has seen the half-close it no longer reads from them, so only the hang-up check frees their slots.
        for _ in 0..<4 {
            let client = try S.subscriber(path)
            #expect(Glibc.shutdown(client.fd, Int32(SHUT_WR)) == 0)
        }
        // Every slot is free again: this subscriber is accepted (S.subscriber throws on "too many subscribers").
        let subscriber = try S.subscriber(path)
        try subscriber.send(line: #"{"status":true}"#)
        #expect(try S.lines(subscriber, 1).first?.contains(#""subscribers":1,"#) == true)
        #expect(server.statistics.subscribers == 1)
    }

    @Test("The socket file has mode 0660 and stop() removes it and disconnects clients")
    func socketFileModeAndStop() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path)
        var info = stat()
        #expect(lstat(path, &info) == 0)
        #expect(info.st_mode & S_IFMT == S_IFSOCK)
        #expect(info.st_mode & 0o7777 == 0o660)

        let client = try S.subscriber(path)
        server.stop()
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(try client.readLine(timeoutSeconds: S.timeout) == .line(#"{"type":"shutdown"}"#))
        #expect(try client.readLine(timeoutSeconds: S.timeout) == .endOfStream)
        server.publish(S.onset("speech", "Speech", 0.9, 0))  // ignored after stop
        server.stop()
        #expect(server.statistics.subscribers == 0)
    }

    @Test("stop() sends {\"type\":\"shutdown\"} after the queued events as every client's last line")
    func shutdownNoticeIsTheLastLine() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path)
        let smoke = try S.subscriber(path, groups: ["smoke_alarm"])
        let all = try S.subscriber(path)
        // A client that shut down its sending side still gets the notice.
        #expect(Glibc.shutdown(all.fd, Int32(SHUT_WR)) == 0)
        server.publish(S.onset("smoke_alarm", "Smoke detector, smoke alarm", 0.9, 1.44), time: S.wallClock)
        server.publish(S.onset("speech", "Speech", 0.8, 2), time: S.wallClock)
        server.stop()
        server.publish(S.onset("smoke_alarm", "Smoke detector, smoke alarm", 0.9, 9), time: S.wallClock)  // ignored

        let smokeLines = try S.lines(smoke, 2)
        #expect(smokeLines.first?.hasPrefix(#"{"type":"detection","group":"smoke_alarm""#) == true)
        #expect(smokeLines.last == #"{"type":"shutdown"}"#)
        #expect(try smoke.readLine(timeoutSeconds: S.timeout) == .endOfStream)
        let allLines = try S.lines(all, 3)
        #expect(allLines.map { $0.hasPrefix(#"{"type":"detection""#) } == [true, true, false])
        #expect(allLines.last == #"{"type":"shutdown"}"#)
        #expect(try all.readLine(timeoutSeconds: S.timeout) == .endOfStream)
    }

    @Test("A client that is behind when the server stops gets the lines that fit, then its dropped count and the shutdown notice")
    func behindAtShutdown() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path)
        let stuck = try S.subscriber(path)
        defer { withExtendedLifetime(stuck) {} }
        let events = (0..<10_000).map { S.onset("smoke_alarm", "Smoke detector, smoke alarm", 0.5, Double($0) * 0.48) }
        let expected = events.map(S.line)
        for event in events { server.publish(event, time: S.wallClock) }
        // It does not read while the server stops (trial 5 #9: it got neither notice, and `earshot listen` took
        // the end for a crash).
        server.stop()
        var received: [String] = []
        while case .line(let line) = try stuck.readLine(timeoutSeconds: S.timeout) { received.append(line) }
        let delivered = received.count - 2
        #expect(delivered > 0 && delivered < 10_000, "\(received.count)")
        #expect(Array(received.prefix(delivered)) == Array(expected.prefix(delivered)))
        #expect(received.suffix(2) == [#"{"type":"dropped","count":\#(10_000 - delivered)}"#, #"{"type":"shutdown"}"#])
    }

    @Test("A stale socket file is replaced; a live one is refused with an exact error")
    func staleAndLiveSockets() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        try S.makeStaleSocket(at: path)
        #expect(throws: EventSubscriber.ConnectError.self) { try EventSubscriber(path: path) }

        let server = try S.server(path)
        _ = try S.subscriber(path)

        #expect(throws: EarshotError(
            .cannotCreate,
            "cannot listen on \(path): another process is already listening there (is earshotd already running? stop it or choose another --socket)")
        ) {
            try S.server(path)
        }
        // The refused second server left the first one's socket alone.
        _ = try S.subscriber(path)

        // The second server's failure did not remove the file; after stop() a new server starts.
        server.stop()
        let again = try S.server(path)
        _ = try S.subscriber(path)
        again.stop()
    }

    @Test("A client that sees the socket file appear is never refused (200 starts watched by a connecting thread); no staging file is left")
    func socketAppearsListening() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let address = try UnixSocketAddress(path: path)
        var refused = 0, connected = 0
        for _ in 0..<200 {
            // The watcher connects the moment the file exists, as a client polling for it (the tests' daemons,
            // a systemd unit's ExecStartPost) does.
            let result = ConnectOutcome()
            let watcher = Thread {
                var info = stat()
                let deadline = Date().addingTimeInterval(S.timeout)
                while lstat(path, &info) != 0, Date() < deadline {}
                let fd = SocketCall.makeStreamSocket(nonBlocking: false)
                result.errnoValue.store(SocketCall.connect(fd, to: address), ordering: .releasing)
                SocketCall.close(fd)
            }
            watcher.start()
            let server = try S.server(path)
            #expect(TestWait.until(seconds: S.timeout) { result.errnoValue.load(ordering: .acquiring) != ConnectOutcome.pending })
            switch result.errnoValue.load(ordering: .acquiring) {
            case 0: connected += 1
            case ECONNREFUSED: refused += 1
            default: break
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["e.sock"])
            server.stop()
        }
        #expect(refused == 0)
        #expect(connected == 200)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
    }

    /// What the watcher's connect(2) gave: 0, an errno, or ``pending``.
    private final class ConnectOutcome: Sendable {
        static let pending: Int32 = -1
        let errnoValue = Atomic<Int32>(ConnectOutcome.pending)
    }

    @Test("Where the staging name does not fit sun_path the socket is bound at its path and still serves")
    func socketWithoutStagingName() throws {
        let directory = try TemporarySocketDirectory()
        // 100 bytes: fits the 107 of sun_path; the staging name beside it (".earshotd-PID-N.sock") does not.
        let folder = directory.file(String(repeating: "d", count: 100 - directory.path.count - 8))
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        let path = folder + "/e.sock"
        #expect(path.utf8.count == 100)
        let server = try S.server(path)
        _ = try S.subscriber(path)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder) == ["e.sock"])
        server.stop()
    }

    @Test("Paths that cannot hold a socket give exact errors")
    func badPaths() throws {
        let directory = try TemporarySocketDirectory()
        let file = directory.file("plain")
        #expect(FileManager.default.createFile(atPath: file, contents: Data("x".utf8)))
        #expect(throws: EarshotError(
            .cannotCreate,
            "cannot create socket \(file): a file that is not a socket is in the way (remove it or choose another --socket)")
        ) { try S.server(file) }

        let missing = directory.file("nodir/e.sock")
        #expect(throws: EarshotError(
            .cannotCreate,
            "cannot create socket \(missing): No such file or directory (create the directory, run under systemd with RuntimeDirectory=earshot, or choose another --socket)",
            cause: "No such file or directory")
        ) { try S.server(missing) }

        let long = "/tmp/" + String(repeating: "d", count: 110) + ".sock"
        #expect(throws: EarshotError(
            .config, "socket path \(long) is too long (120 bytes; Unix sockets allow at most 107): choose a shorter path")
        ) { try S.server(long) }
        #expect(throws: EarshotError(
            .config, "socket path \"\" is invalid (give a file path such as /run/earshot/earshot.sock)")
        ) { try S.server("") }
    }
}
