import Earshot
import Foundation

// `earshotd`: being wired.
FileHandle.standardError.write(Data("earshotd: not wired yet\n".utf8))
exit(69)
