/// Earshot's version (semantic versioning: major.minor.patch), printed by `earshot --version` and
/// `earshotd --version`. 0.x: the configuration file, the socket's JSON lines and the library API may still change
/// between minor versions.
public let earshotVersion = "0.1.0"
