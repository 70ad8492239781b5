import Foundation
import Testing
import Glibc
import EarshotSupport
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("Printed commands quote their paths")
struct ShellWordTests {
    @Test("the try-it line's model path is one shell word: quoted when it has spaces or quotes")
    func shellWord() {
        #expect(DisplayText.shellWord("/tmp/x/Door Bell.v2.earshot") == "'/tmp/x/Door Bell.v2.earshot'")
        #expect(DisplayText.shellWord("/tmp/it's.earshot") == #"'/tmp/it'\''s.earshot'"#)
        #expect(DisplayText.shellWord("/tmp/x/doorbell.earshot") == "/tmp/x/doorbell.earshot")
    }
}
