import Foundation
import Testing
import Glibc
import EarshotSupport
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("[notify] url: a list written with commas")
struct NotifyURLListTests {
    @Test("[notify] url = A, B is refused with its line and the fix (URLs are separated by spaces)")
    func notifyURLWithComma() throws {
        #expect(throws: EarshotError(.config, "n.conf:2: [notify] url: \"http://127.0.0.1:9/a,\" ends with \",\"; separate several URLs with spaces, not commas, e.g. url = https://ntfy.sh/topic-a https://ntfy.sh/topic-b")) {
            try DaemonConfiguration.parse("[notify]\nurl = http://127.0.0.1:9/a, http://127.0.0.1:9/b\n", source: "n.conf")
        }
        let spaced = try DaemonConfiguration.parse("[notify]\nurl = http://127.0.0.1:9/a http://127.0.0.1:9/b?x=1,2\n", source: "n.conf")
        #expect(spaced.notify.urls == ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b?x=1,2"])
    }
}
