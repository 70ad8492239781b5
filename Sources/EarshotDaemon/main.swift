import EarshotSupport
import EarshotService
import Glibc

// `earshotd`: argument parsing and wiring only; the daemon lives in `EarshotDaemon` (Sources/EarshotService/Daemon).

func fail(_ error: EarshotError, commandLine: DaemonCommandLine?) -> Never {
    // A URL the message quotes from the configuration file is shown cut, as the logs show one: errors found after
    // the file was read (a class name, a path) quote its values too.
    let error = commandLine.map { DaemonConfiguration.redactingURLs(in: error, configPath: $0.configPath) } ?? error
    // Control characters in the message (from a config value or a path) are escaped: one line, no terminal codes.
    let line = Array("earshotd: \(DisplayText.escaped(error.message))\n".utf8)
    _ = line.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
    exit(error.exitStatus)
}

let commandLine: DaemonCommandLine
do {
    // Before any thread starts, so that every thread inherits the blocked set and only the Dispatch sources see them.
    try SignalHandling.blockSignals()
    commandLine = try DaemonCommandLine.parse(CommandLine.arguments.dropFirst())
} catch {
    fail(error, commandLine: nil)
}
do {
    switch commandLine.action {
    case .help:
        print(DaemonCommandLine.helpText)
        exit(0)
    case .version:
        print("earshotd \(earshotVersion)")
        exit(0)
    case .checkConfig:
        let line = try DaemonConfiguration.check(commandLine: commandLine) { warning in
            _ = writeAll(STDERR_FILENO, "earshotd: warning: \(DisplayText.escaped(warning))\n")
        }
        print("earshotd: \(DisplayText.escaped(line))")
        exit(0)
    case .run:
        try EarshotDaemon(commandLine: commandLine).run()
    }
} catch {
    fail(error, commandLine: commandLine)
}
