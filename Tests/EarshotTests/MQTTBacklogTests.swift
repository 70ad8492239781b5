import Foundation
import Synchronization
import Testing
import EarshotOutputs

/// Trial 6 #6 and #7 against a real mosquitto broker: QoS 0 messages (the 1 Hz level) leave the outbox once sent,
/// so `waiting` and `dropped` stay 0 while the broker keeps up; the reconnect back-off is capped at 5 s.
@Suite("MQTT: the outbox with a healthy broker, and the reconnect back-off")
struct MQTTBacklogTests {
    /// What the connection told its owner.
    final class Recorder: MQTTConnectionDelegate, @unchecked Sendable {
        let retries = Mutex<[Double]>([])
        let connects = Atomic<Int>(0)

        func connectionDidConnect(_ connection: MQTTConnection) -> MQTTConnection.Birth {
            connects.wrappingAdd(1, ordering: .relaxed)
            return MQTTConnection.Birth()
        }

        func connection(_ connection: MQTTConnection, didFail cause: String, retryIn: Double?) {
            if let retryIn { retries.withLock { $0.append(retryIn) } }
        }

        func connection(_ connection: MQTTConnection, didReceive topic: String, payload: [UInt8], retained: Bool) {}
    }

    @Test("broker away: retries 1, 2, 4, 5, 5 s apart; back: connected; 300 QoS 0 and 3 QoS 1 messages leave nothing waiting or dropped",
          .needsMosquitto, .timeLimit(.minutes(2)))
    func levelMessagesDoNotPileUp() throws {
        let broker = try MosquittoBroker()
        broker.stop()
        var settings = MQTTSettings()
        settings.enabled = true
        settings.node = "backlog"
        settings.host = "127.0.0.1"
        settings.port = broker.port
        let connection = try MQTTConnection(endpoint: MQTTSink.endpoint(settings, will: nil))
        let recorder = Recorder()
        try connection.start(delegate: recorder)
        defer { connection.stop() }
        try #require(TestWait.until(seconds: 30) { recorder.retries.withLock { $0.count } >= 5 })
        #expect(recorder.retries.withLock { Array($0.prefix(5)) } == [1, 2, 4, 5, 5])

        try broker.start()
        defer { broker.stop() }
        try #require(TestWait.until(seconds: 10) { connection.isConnected })
        for index in 0..<300 {
            connection.enqueue(MQTTMessage(topic: "earshot/backlog/level", text: "-\(index).0", qos: 0, retain: false))
            if index % 100 == 0 {
                connection.enqueue(MQTTMessage(topic: "earshot/backlog/event", text: "{\"n\":\(index)}", qos: 1, retain: false))
            }
        }
        try #require(TestWait.until(seconds: 10) { connection.publishedCount == 303 && connection.backlog.waiting == 0 },
                     "published \(connection.publishedCount), backlog \(connection.backlog)")
        #expect(connection.backlog.waiting == 0)
        #expect(connection.backlog.dropped == 0)
        #expect(recorder.connects.load(ordering: .relaxed) == 1)
    }
}
