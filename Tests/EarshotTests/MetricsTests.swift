import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("Metrics: [metrics], the exposition, a scrape of a running daemon")
struct MetricsTests {
    @Test("[metrics] settings: defaults off on 127.0.0.1:9464; listen forms; bad values and remote addresses are one line")
    func settings() throws {
        #expect(DaemonConfiguration().metrics.enabled == false)
        #expect(DaemonConfiguration().metrics.listen.description == "127.0.0.1:9464")
        let parsed = try DaemonConfiguration.parse("[metrics]\nenabled = true\nlisten = [::1]:9100\n", source: "e.conf")
        #expect(parsed.metrics.enabled)
        #expect(parsed.metrics.listen == MetricsEndpoint("[::1]:9100"))
        #expect(parsed.metrics.listen.isIPv6 && parsed.metrics.listen.isLoopback)
        #expect(MetricsEndpoint("localhost:80")?.description == "127.0.0.1:80")
        #expect(MetricsEndpoint("127.3.4.5:1")?.isLoopback == true)
        #expect(MetricsEndpoint("0.0.0.0:9464")?.isLoopback == false)
        for bad in ["9464", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", "host.example:9464", "[::1]9464", "::1:9464", "127.0.0.1: 9"] {
            #expect(MetricsEndpoint(bad) == nil, "\(bad)")
        }
        #expect(throws: EarshotError(.config, "e.conf:2: [metrics] listen = localhost: must be HOST:PORT with an IPv4 address, [IPv6] or localhost and a port in [1, 65535], e.g. 127.0.0.1:9464")) {
            try DaemonConfiguration.parse("[metrics]\nlisten = localhost\n", source: "e.conf")
        }
        #expect(throws: EarshotError(.config, "e.conf:3: [metrics] listen = 192.0.2.10:9464: not a local address, so anyone on the network could read the metrics (use 127.0.0.1:9464 or [::1]:9464, or set allow_remote = true in [metrics])")) {
            try DaemonConfiguration.parse("[metrics]\nenabled = true\nlisten = 192.0.2.10:9464\n", source: "e.conf")
        }
        // Off, a remote address is not checked; allowed, it is taken.
        _ = try DaemonConfiguration.parse("[metrics]\nlisten = 0.0.0.0:9464\n", source: "e.conf")
        let remote = try DaemonConfiguration.parse("[metrics]\nenabled = true\nlisten = 0.0.0.0:9464\nallow_remote = yes\n", source: "e.conf")
        #expect(remote.metrics.allowRemote && remote.metrics.listen.host == "0.0.0.0")
    }

    @Test("the exposition of a known snapshot, line by line, and promtool accepts it", .needsPromtool)
    func exposition() throws {
        var snapshot = MetricsSnapshot()
        snapshot.declare(groups: ["smoke_alarm", "baby_cry"])
        var stats = RuntimeStatistics()
        stats.audioProcessedSeconds = 12.5
        stats.captureXruns = 2
        stats.audioLostSeconds = 0.25
        stats.socketClients = 3
        stats.socketDroppedLines = 7
        stats.historyWriteErrors = 1
        stats.mqtt = RuntimeStatistics.MQTTFigures(connected: true, published: 40, dropped: 0, waiting: 2)
        stats.captureLive = true
        stats.notify = RuntimeStatistics.NotifyFigures(sent: 5, failed: 2, dropped: 1)
        snapshot.statistics = stats
        var scored = ClassificationResult(
            timeRange: TimeRange(start: 0, duration: 0.96), classifications: [], scores: [], levelDBFS: -23.456, isGated: false)
        scored.inferenceDuration = 0.001953125
        snapshot.observe(window: scored)
        scored.inferenceDuration = 0.03125
        snapshot.observe(window: scored)
        snapshot.observe(window: .gated(timeRange: TimeRange(start: 0.48, duration: 0.96), levelDBFS: -61.04))
        snapshot.observe(group: "baby_cry", counted: true, open: true)
        let text = snapshot.exposition(version: "1.2.3")
        let expected = """
            # HELP earshot_build_info Earshot's version, as a label; the value is 1.
            # TYPE earshot_build_info gauge
            earshot_build_info{version="1.2.3"} 1
            # HELP earshot_audio_processed_seconds_total Audio analysed since start, in seconds.
            # TYPE earshot_audio_processed_seconds_total counter
            earshot_audio_processed_seconds_total 12.5
            # HELP earshot_capture_xruns_total Capture overruns (xruns) since start.
            # TYPE earshot_capture_xruns_total counter
            earshot_capture_xruns_total 2
            # HELP earshot_audio_lost_seconds_total Audio lost in gaps of the stream (xruns, a device reopened), in seconds.
            # TYPE earshot_audio_lost_seconds_total counter
            earshot_audio_lost_seconds_total 0.25
            # HELP earshot_capture_up 1 while audio arrives from the capture device or input, 0 while it is opening, unavailable or stalled.
            # TYPE earshot_capture_up gauge
            earshot_capture_up 1
            # HELP earshot_level_dbfs RMS level of the latest analysis window, in dBFS to 0.01 (-120 for digital silence).
            # TYPE earshot_level_dbfs gauge
            earshot_level_dbfs -61.04
            # HELP earshot_gate_open 1 when the latest window was loud enough to be classified, else 0.
            # TYPE earshot_gate_open gauge
            earshot_gate_open 0
            # HELP earshot_inference_duration_seconds Time to classify one window (the model and any custom heads), in seconds.
            # TYPE earshot_inference_duration_seconds histogram
            earshot_inference_duration_seconds_bucket{le="0.0005"} 0
            earshot_inference_duration_seconds_bucket{le="0.001"} 0
            earshot_inference_duration_seconds_bucket{le="0.002"} 1
            earshot_inference_duration_seconds_bucket{le="0.005"} 1
            earshot_inference_duration_seconds_bucket{le="0.01"} 1
            earshot_inference_duration_seconds_bucket{le="0.02"} 1
            earshot_inference_duration_seconds_bucket{le="0.05"} 2
            earshot_inference_duration_seconds_bucket{le="0.1"} 2
            earshot_inference_duration_seconds_bucket{le="0.25"} 2
            earshot_inference_duration_seconds_bucket{le="1"} 2
            earshot_inference_duration_seconds_bucket{le="+Inf"} 2
            earshot_inference_duration_seconds_sum 0.033203125
            earshot_inference_duration_seconds_count 2
            # HELP earshot_windows_total Analysis windows since start, gated ones included.
            # TYPE earshot_windows_total counter
            earshot_windows_total 3
            # HELP earshot_windows_gated_total Windows below the gate level, not classified.
            # TYPE earshot_windows_gated_total counter
            earshot_windows_gated_total 1
            # HELP earshot_events_total Detection events (onsets) published, by group.
            # TYPE earshot_events_total counter
            earshot_events_total{group="baby_cry"} 1
            earshot_events_total{group="smoke_alarm"} 0
            # HELP earshot_event_active 1 while the group's event is open, else 0.
            # TYPE earshot_event_active gauge
            earshot_event_active{group="baby_cry"} 1
            earshot_event_active{group="smoke_alarm"} 0
            # HELP earshot_socket_clients Clients connected to the event socket.
            # TYPE earshot_socket_clients gauge
            earshot_socket_clients 3
            # HELP earshot_socket_dropped_lines_total Event lines dropped for socket clients that fell behind.
            # TYPE earshot_socket_dropped_lines_total counter
            earshot_socket_dropped_lines_total 7
            # HELP earshot_history_write_errors_total Failed writes to the event history database.
            # TYPE earshot_history_write_errors_total counter
            earshot_history_write_errors_total 1
            # HELP earshot_mqtt_connected 1 while connected to the MQTT broker, else 0.
            # TYPE earshot_mqtt_connected gauge
            earshot_mqtt_connected 1
            # HELP earshot_mqtt_published_total Messages published to the MQTT broker.
            # TYPE earshot_mqtt_published_total counter
            earshot_mqtt_published_total 40
            # HELP earshot_mqtt_dropped_total MQTT messages dropped because the outbox was full.
            # TYPE earshot_mqtt_dropped_total counter
            earshot_mqtt_dropped_total 0
            # HELP earshot_mqtt_waiting MQTT messages waiting for the broker.
            # TYPE earshot_mqtt_waiting gauge
            earshot_mqtt_waiting 2
            # HELP earshot_notify_sent_total Notifications a URL accepted (HTTP 2xx), counted per URL.
            # TYPE earshot_notify_sent_total counter
            earshot_notify_sent_total 5
            # HELP earshot_notify_failed_total Notifications given up for a URL after their retries, counted per URL.
            # TYPE earshot_notify_failed_total counter
            earshot_notify_failed_total 2
            # HELP earshot_notify_dropped_total Notifications dropped because a URL's queue was full.
            # TYPE earshot_notify_dropped_total counter
            earshot_notify_dropped_total 1

            """
        #expect(text == expected)
        let check = try Promtool.check(text)
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.isEmpty, "\(check.output)")
    }

    @Test("a running daemon: scraped over HTTP after the demo's first 16 s, exact counters; promtool accepts the scrape; 404 and 405",
          .needsEarshotdBuilt, .needsPromtool)
    func scrapeRunningDaemon() throws {
        let port = try FreePort.pick()
        let scratch = try DaemonScratch(["[detection]", "watch = baby_cry | loud", "[metrics]", "enabled = true", "listen = 127.0.0.1:\(port)"])
        defer { scratch.remove() }
        let daemon = try DaemonProcess(["--config", scratch.config.path, "--input", "-"], standardInput: true)
        #expect(TestWait.until(seconds: 30) { HTTPGet.fetch(port: port) != nil }, "\(daemon.errorText)")
        // A socket client, so that the clients gauge has something to count.
        let client = try EventSubscriber(path: scratch.socket)
        try client.send(line: #"{"subscribe":["baby_cry"]}"#)
        #expect(try client.nextReply(timeoutSeconds: 10) == #"{"type":"subscribed","groups":["baby_cry"]}"#)
        let samples = try AudioFileDecoder(url: TestPaths.packageRoot.appendingPathComponent("samples/demo.flac")).readAllMono()
        daemon.input.fileHandleForWriting.write(SyntheticAudio.pcm(Array(samples.prefix(16 * 16_000))))
        var scrape = ""
        let processed = TestWait.until(seconds: 60) {
            scrape = HTTPGet.fetch(port: port)?.body ?? ""
            let values = HTTPGet.samples(scrape)
            return values["earshot_audio_processed_seconds_total"] == "16" && values["earshot_event_active{group=\"loud\"}"] == "0"
                && values["earshot_socket_clients"] == "1"
        }
        #expect(processed, "\(scrape)\n\(daemon.errorText)")
        let values = HTTPGet.samples(scrape)
        // 16 s at 16 kHz: windows of 0.96 s every 0.48 s that fit, starting at 0, 0.48, ... 14.88.
        #expect(values["earshot_windows_total"] == "32")
        #expect(values["earshot_build_info{version=\"\(earshotVersion)\"}"] == "1")
        #expect(values["earshot_capture_xruns_total"] == "0")
        #expect(values["earshot_audio_lost_seconds_total"] == "0")
        #expect(values["earshot_events_total{group=\"baby_cry\"}"] == "1")
        #expect(values["earshot_events_total{group=\"loud\"}"] == "1")
        #expect(values["earshot_events_total{group=\"snoring\"}"] == "0")
        #expect(values["earshot_event_active{group=\"baby_cry\"}"] == "0")
        #expect(values["earshot_socket_dropped_lines_total"] == "0")
        #expect(values["earshot_history_write_errors_total"] == "0")
        #expect(values["earshot_mqtt_connected"] == nil)  // [mqtt] is off
        #expect(values["earshot_notify_failed_total"] == nil)  // [notify] is off
        #expect(values["earshot_capture_up"] == "1")
        let windows = Int(values["earshot_windows_total"] ?? "") ?? -1
        let gated = Int(values["earshot_windows_gated_total"] ?? "") ?? -1
        #expect(gated > 0 && gated < windows, "\(gated) of \(windows)")
        // Every classified window was timed, and the histogram is cumulative up to its count.
        #expect(values["earshot_inference_duration_seconds_count"] == String(windows - gated))
        #expect(values["earshot_inference_duration_seconds_bucket{le=\"+Inf\"}"] == String(windows - gated))
        // The last window (14.88-15.84 s) of the demo: snoring at -45.6 dBFS, above the -50 dBFS gate.
        #expect(values["earshot_gate_open"] == "1")
        let check = try Promtool.check(scrape)
        #expect(check.status == 0 && check.output.isEmpty, "\(check.output)")
        let response = try #require(HTTPGet.fetch(port: port))
        #expect(response.status == 200)
        #expect(response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8")
        let missing = try #require(HTTPGet.fetch(port: port, path: "/"))
        #expect(missing.status == 404)
        #expect(missing.body == "not found: the metrics are at /metrics\n")
        let post = try #require(HTTPGet.fetch(port: port, method: "POST"))
        #expect(post.status == 405)
        #expect(post.headers["allow"] == "GET, HEAD")
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 60) == 0, "\(daemon.errorText)")
        // Stopped: nothing listens on the port any more.
        #expect(HTTPGet.fetch(port: port) == nil)
    }

    @Test("a capture device that cannot be opened: earshot_capture_up 0 (trial 7 #11)", .needsEarshotdBuilt, .needsPromtool)
    func captureDown() throws {
        let port = try FreePort.pick()
        let scratch = try DaemonScratch(["[metrics]", "enabled = true", "listen = 127.0.0.1:\(port)"])
        defer { scratch.remove() }
        let daemon = try DaemonProcess(["--config", scratch.config.path, "--device", "earshot_no_such_pcm"])
        var scrape = ""
        let down = TestWait.until(seconds: 30) {
            scrape = HTTPGet.fetch(port: port)?.body ?? ""
            // Unavailable for a second at least: the statistics routed every second have seen it.
            guard (try? MQTTBrokerTests.status(socket: scratch.socket, timeout: 5))?["capture"] as? String == "unavailable" else { return false }
            Thread.sleep(forTimeInterval: 1.5)
            scrape = HTTPGet.fetch(port: port)?.body ?? ""
            return true
        }
        #expect(down, "\(scrape)\n\(daemon.errorText)")
        #expect(HTTPGet.samples(scrape)["earshot_capture_up"] == "0")
        #expect(HTTPGet.samples(scrape)["earshot_notify_failed_total"] == nil)  // [notify] is off
        let check = try Promtool.check(scrape)
        #expect(check.status == 0 && check.output.isEmpty, "\(check.output)")
        daemon.process.terminate()
        #expect(daemon.wait(seconds: 30) == 0, "\(daemon.errorText)")
    }

    @Test("a notification nobody accepts (HTTP 404, not retried): earshot_notify_failed_total 1, sent 0 (trial 7 #11)",
          .needsEarshotdBuilt, .needsPromtool)
    func notifyFailedCounter() throws {
        let port = try FreePort.pick()
        // A 404 is given up at once (a refused connection would be retried for 2 minutes: an onset is news that long).
        let refusing = try HTTPTestServer { _ in .init(status: 404) }
        defer { refusing.stop() }
        let scratch = try DaemonScratch([
            "[detection]", "watch = loud", "[metrics]", "enabled = true", "listen = 127.0.0.1:\(port)",
            // health = false: the "listening" and "no audio arrives" messages would fail too (counted before and
            // after the onset); this test counts the event's notification alone.
            "[notify]", "url = \(refusing.url("/hook"))", "retries = 0", "timeout = 2", "health = false",
        ])
        defer { scratch.remove() }
        let daemon = try DaemonProcess(["--config", scratch.config.path, "--input", "-"], standardInput: true)
        #expect(TestWait.until(seconds: 30) { HTTPGet.fetch(port: port) != nil }, "\(daemon.errorText)")
        // 4 s of a 1 kHz sine at -23 dBFS: one `loud` onset (-30 dBFS for 2 s), notified once.
        daemon.input.fileHandleForWriting.write(SyntheticAudio.pcm(SyntheticAudio.sine(seconds: 4, amplitude: 0.1)))
        var scrape = ""
        let failed = TestWait.until(seconds: 60) {
            scrape = HTTPGet.fetch(port: port)?.body ?? ""
            return HTTPGet.samples(scrape)["earshot_notify_failed_total"] == "1"
        }
        #expect(failed, "\(scrape)\n\(daemon.errorText)")
        let values = HTTPGet.samples(scrape)
        #expect(values["earshot_notify_sent_total"] == "0")
        #expect(values["earshot_notify_dropped_total"] == "0")
        #expect(values["earshot_events_total{group=\"loud\"}"] == "1")
        #expect(values["earshot_capture_up"] == "1")
        let check = try Promtool.check(scrape)
        #expect(check.status == 0 && check.output.isEmpty, "\(check.output)")
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 60) == 0, "\(daemon.errorText)")
    }

    @Test("--check-config while the daemon runs with [metrics]: the address it holds passes with a note (trial 5 #5); another program's is refused, 78",
          .needsEarshotdBuilt)
    func checkConfigWhileRunning() throws {
        let port = try FreePort.pick()
        let scratch = try DaemonScratch(["[metrics]", "enabled = true", "listen = 127.0.0.1:\(port)"])
        defer { scratch.remove() }
        let daemon = try DaemonProcess(["--config", scratch.config.path, "--input", "-"], standardInput: true)
        #expect(TestWait.until(seconds: 30) { HTTPGet.fetch(port: port) != nil }, "\(daemon.errorText)")
        let check = try #require(try EarshotdRun.run(["--config", scratch.config.path, "--check-config"]))
        #expect(check.status == 0, "\(check.error)")
        #expect(check.output == "earshotd: configuration OK (watching smoke_alarm, fire_alarm, co_alarm, baby_cry, glass_break); [metrics] listen = 127.0.0.1:\(port) is in use by a running earshotd (its /metrics answers): a reload of that daemon keeps it; another earshotd could not start with it\n")
        #expect(check.error == "")
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 60) == 0, "\(daemon.errorText)")

        // A listener that is not earshotd's (it accepts and answers nothing): the start's line, 78.
        let holder = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(holder) }
        let held = try #require(FreePort.bindLoopback(holder))
        #expect(listen(holder, 1) == 0)
        let other = try DaemonScratch(["[metrics]", "enabled = true", "listen = 127.0.0.1:\(held)"])
        defer { other.remove() }
        let refused = try #require(try EarshotdRun.run(["--config", other.config.path, "--check-config"]))
        #expect(refused.status == 78)
        #expect(refused.error == "earshotd: \(other.config.path):8: [metrics] listen = 127.0.0.1:\(held): Address already in use (another program, or another earshotd, listens there; choose another port)\n")
    }

    @Test("an address in use: one line naming the file, line and fix, exit 78, no socket file left; a remote address is refused by --check-config",
          .needsEarshotdBuilt)
    func addressInUse() throws {
        // Something of the test's own listens on the port.
        let holder = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(holder) }
        let port = try #require(FreePort.bindLoopback(holder))
        #expect(listen(holder, 1) == 0)
        let scratch = try DaemonScratch(["[metrics]", "enabled = true", "listen = 127.0.0.1:\(port)"])
        defer { scratch.remove() }
        let run = try #require(try EarshotdRun.run(["--config", scratch.config.path, "--input", TestPaths.packageRoot.appendingPathComponent("samples/demo.flac").path]))
        #expect(run.status == 78)
        #expect(run.error == "earshotd: \(scratch.config.path):8: [metrics] listen = 127.0.0.1:\(port): Address already in use (another program, or another earshotd, listens there; choose another port)\n")
        #expect(!FileManager.default.fileExists(atPath: scratch.socket))

        let remote = try DaemonScratch(["[metrics]", "enabled = true", "listen = 0.0.0.0:\(port)"])
        defer { remote.remove() }
        let check = try #require(try EarshotdRun.run(["--config", remote.config.path, "--check-config"]))
        #expect(check.status == 78)
        #expect(check.error == "earshotd: \(remote.config.path):8: [metrics] listen = 0.0.0.0:\(port): not a local address, so anyone on the network could read the metrics (use 127.0.0.1:\(port) or [::1]:\(port), or set allow_remote = true in [metrics])\n")
    }
}
