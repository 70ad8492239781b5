import Foundation
import Testing
import Glibc
import EarshotSupport
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("[mqtt] password_file needs username")
struct MQTTPasswordUserTests {
    @Test("[mqtt] password_file without username is refused on the password_file line")
    func passwordWithoutUser() throws {
        #expect(throws: EarshotError(.config, "p.conf:4: [mqtt] password_file needs username (set [mqtt] username to the broker's user for that password)")) {
            try DaemonConfiguration.parse("[mqtt]\nenabled = true\nhost = 127.0.0.1\npassword_file = /etc/earshot/pw\n", source: "p.conf")
        }
        let both = try DaemonConfiguration.parse("[mqtt]\nusername = earshot\npassword_file = /etc/earshot/pw\n", source: "p.conf")
        #expect(both.mqtt.username == "earshot")
    }
}
