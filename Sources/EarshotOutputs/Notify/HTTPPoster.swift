internal import CCurlShims
import FoundationEssentials
import Glibc
import Synchronization
import EarshotSupport

/// One HTTP POST at a time through a libcurl easy handle, which it owns (cleaned up in `deinit`).
///
/// - Important: Use it from one thread at a time (libcurl's rule for an easy handle); the notification sink gives
///   each URL its own poster on its own queue.
final class HTTPPoster {
    /// What one POST came to.
    enum Outcome: Sendable, Equatable {
        /// The server answered with this HTTP status (any: the caller decides what is a success), and with the
        /// seconds its `Retry-After` header asked for (nil without one; an HTTP-date is turned into seconds from
        /// now by libcurl).
        case status(Int, retryAfterSeconds: Double?)
        /// No answer: libcurl's error text (`curl_easy_strerror`), e.g. `Timeout was reached`,
        /// `Couldn't connect to server`, and whether the request had been sent in full before it failed (the server
        /// may have it: a timeout while waiting for the answer, a server that read it and closed the connection).
        case failed(String, requestSent: Bool)
    }

    private let handle: UnsafeMutableRawPointer

    /// - Throws: `EarshotError(.unavailable)` when libcurl cannot be loaded (it is opened with `dlopen` on first
    ///   use: Debian's libcurl4), `EarshotError(.system)` when it cannot make a handle. The corresponding C
    ///   functions are `dlopen`, `curl_global_init` and `curl_easy_init`.
    init() throws(EarshotError) {
        if let failure = earshot_curl_load() {
            let reason = String(cString: failure)
            throw EarshotError(.unavailable, "[notify] needs libcurl, which cannot be loaded (\(reason)): install libcurl4 (apt-get install libcurl4)",
                               cause: reason)
        }
        guard let handle = earshot_curl_easy_init() else {
            throw EarshotError(.system, "libcurl cannot create a handle (curl_easy_init failed)")
        }
        self.handle = handle
    }

    deinit { earshot_curl_easy_cleanup(handle) }

    /// POSTs `body` to `url` with `headers` (`Name: value`), waiting at most `timeoutSeconds` for the whole
    /// exchange (connect included). No redirects are followed; the response body is read and discarded; the
    /// status and `Retry-After` are returned. Each POST has a connection of its own, closed after it
    /// (`CURLOPT_FRESH_CONNECT`, `CURLOPT_FORBID_REUSE`): on a reused keep-alive connection that the server closes
    /// without an answer, libcurl sends the request again on a new one by itself, so a server that had read it got
    /// it twice (trial 15 M1). The corresponding C functions are `curl_easy_setopt`, `curl_easy_perform` and
    /// `curl_easy_getinfo` (`CURLINFO_RESPONSE_CODE`, `CURLINFO_RETRY_AFTER`, `CURLINFO_REQUEST_SIZE`).
    func post(url: String, headers: [String], body: [UInt8], timeoutSeconds: Double) -> Outcome {
        earshot_curl_easy_reset(handle)
        var list: UnsafeMutablePointer<curl_slist>?
        // No "Expect: 100-continue" round trip for larger bodies.
        for header in headers + ["Expect:"] {
            guard let appended = earshot_curl_slist_append(list, header) else {
                earshot_curl_slist_free_all(list)
                return .failed("out of memory (curl_slist_append)", requestSent: false)
            }
            list = appended
        }
        defer { earshot_curl_slist_free_all(list) }
        return body.withUnsafeBufferPointer { bytes in
            // An empty array may have no base address; libcurl needs a pointer for POSTFIELDS.
            let empty: [UInt8] = [0]
            return empty.withUnsafeBufferPointer { zero in
                let fields = UnsafeRawPointer(bytes.baseAddress ?? zero.baseAddress!)
                return perform(url: url, timeoutSeconds: timeoutSeconds, options: [
                    earshot_curl_setopt_long(handle, CURLOPT_POST, 1),
                    earshot_curl_setopt_long(handle, CURLOPT_POSTFIELDSIZE, body.count),
                    earshot_curl_setopt_pointer(handle, CURLOPT_POSTFIELDS, fields),
                    earshot_curl_setopt_pointer(handle, CURLOPT_HTTPHEADER, list.map { UnsafeRawPointer($0) }),
                ])
            }
        }
    }

    /// Asks `url` for its headers alone (HTTP `HEAD`: nothing is posted, no notification is sent), waiting at most
    /// `timeoutSeconds` for the whole exchange, on a connection of its own: whether the server can be reached
    /// (name resolved, connection and TLS verification done, an answer read). Any HTTP status is an answer.
    /// The corresponding C functions are `curl_easy_setopt` (`CURLOPT_NOBODY`) and `curl_easy_perform`.
    func head(url: String, timeoutSeconds: Double) -> Outcome {
        earshot_curl_easy_reset(handle)
        return perform(url: url, timeoutSeconds: timeoutSeconds, options: [earshot_curl_setopt_long(handle, CURLOPT_NOBODY, 1)])
    }

    /// One request to `url` on the handle, its own `options` set (their return codes) after the URL; the settings
    /// every request has: no signals, a fresh connection closed after it, `timeoutSeconds` for all of it, http and
    /// https only, earshotd's user agent, the answer's body discarded.
    private func perform(url: String, timeoutSeconds: Double, options: @autoclosure () -> [CURLcode]) -> Outcome {
        let milliseconds = max(1, Int(timeoutSeconds * 1000))
        let outcome: CURLcode = url.withCString { urlText in
            let settings: [CURLcode] = [
                earshot_curl_setopt_pointer(handle, CURLOPT_URL, urlText),
                earshot_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1),
                earshot_curl_setopt_long(handle, CURLOPT_FRESH_CONNECT, 1),
                earshot_curl_setopt_long(handle, CURLOPT_FORBID_REUSE, 1),
            ] + options() + [
                earshot_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, milliseconds),
                earshot_curl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, milliseconds),
                earshot_curl_setopt_long(handle, CURLOPT_PROTOCOLS, Int(CURLPROTO_HTTP | CURLPROTO_HTTPS)),
                earshot_curl_setopt_pointer(handle, CURLOPT_USERAGENT, "earshotd/\(earshotVersion)"),
                earshot_curl_discard_body(handle),
            ]
            if let failed = settings.first(where: { $0 != CURLE_OK }) { return failed }
            return earshot_curl_easy_perform(handle)
        }
        guard outcome == CURLE_OK else {
            // CURLINFO_REQUEST_SIZE: the bytes of the request headers sent; the body follows them at once (no
            // "Expect: 100-continue"), so a request whose headers went out is taken as sent.
            var requestBytes = 0
            let sent = earshot_curl_getinfo_long(handle, CURLINFO_REQUEST_SIZE, &requestBytes) == CURLE_OK && requestBytes > 0
            return .failed(String(cString: earshot_curl_easy_strerror(outcome)), requestSent: sent)
        }
        var status = 0
        guard earshot_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK else {
            return .failed("no HTTP status (curl_easy_getinfo)", requestSent: true)
        }
        // CURLINFO_RETRY_AFTER: libcurl 7.66 on; 0 when the header is missing or unreadable.
        var retryAfter: curl_off_t = 0
        let readRetryAfter = earshot_curl_getinfo_off_t(handle, CURLINFO_RETRY_AFTER, &retryAfter) == CURLE_OK
        return .status(status, retryAfterSeconds: readRetryAfter && retryAfter > 0 ? Double(retryAfter) : nil)
    }
}
