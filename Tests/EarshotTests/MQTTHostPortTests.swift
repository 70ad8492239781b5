import Foundation
import Testing
import Glibc
import EarshotSupport
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("[mqtt] host with a port")
struct MQTTHostPortTests {
    @Test("[mqtt] host = HOST:PORT is a configuration error naming the port key; an IPv6 address is not")
    func mqttHostWithPort() throws {
        #expect(throws: EarshotError(.config, "c.conf:3: [mqtt] host = 127.0.0.1:1883: has a port: put the port in [mqtt] port (host = 127.0.0.1 and port = 1883)")) {
            try DaemonConfiguration.parse("[mqtt]\nenabled = true\nhost = 127.0.0.1:1883\n", source: "c.conf")
        }
        #expect(try DaemonConfiguration.parse("[mqtt]\nhost = ::1\n", source: "c.conf").mqtt.host == "::1")
        #expect(try DaemonConfiguration.parse("[mqtt]\nhost = broker.lan\n", source: "c.conf").mqtt.host == "broker.lan")
    }
}
