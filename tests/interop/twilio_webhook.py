"""Interop: the official `twilio` package signs a voice webhook as Twilio does, livegate accepts
it (and refuses a wrong or misdirected signature), and livegate's TwiML is the document the
package's own VoiceResponse builds for the same <Connect><Stream> with its <Parameter>s.

Runs the real gateway binary on 127.0.0.1 (any free port) with authentication on, so the stream
URL carries a token.

Usage: python tests/interop/twilio_webhook.py path/to/livegate
"""

import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

from twilio.request_validator import RequestValidator
from twilio.twiml.voice_response import Connect, Stream, VoiceResponse

AUTH_TOKEN = "interop-twilio-auth-token"
TIMEOUT = 30


def start_gateway(binary):
    env = dict(os.environ)
    env.update({
        "TWILIO_AUTH_TOKEN": AUTH_TOKEN,
        "LIVEGATE_TOKEN_SECRET": "interop-token-secret-0123456789abcdef",
        "LIVEGATE_API_KEYS": "interop-operator-key-0123456789",
    })
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1:0", "--auth", "token", "--session-store", "memory:",
         "--artifact-store", "memory:"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    for line in proc.stdout:
        match = re.search(r"listening on http://(\S+)", line)
        if match:
            return proc, match.group(1)
    raise SystemExit("gateway did not start")


def post(url, params, signature):
    body = urllib.parse.urlencode(params).encode()
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    if signature is not None:
        request.add_header("X-Twilio-Signature", signature)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def tree(element):
    """An XML element as comparable data: tag, attributes, children."""
    return (element.tag, dict(element.attrib), [tree(child) for child in element])


def main():
    binary = sys.argv[1]
    proc, addr = start_gateway(binary)
    try:
        validator = RequestValidator(AUTH_TOKEN)
        url = f"http://{addr}/telephony/twilio/voice?campaign=spring"
        params = {
            "AccountSid": "AC00000000000000000000000000000000",
            "CallSid": "CA0123456789abcdef0123456789abcdef",
            "From": "+15550100",
            "To": "+15550199",
            "CallStatus": "ringing",
        }
        signature = validator.compute_signature(url, params)

        status, _ = post(url, params, None)
        assert status == 403, f"an unsigned webhook must be refused, got {status}"
        status, _ = post(url, params, RequestValidator("another-token").compute_signature(url, params))
        assert status == 403, f"a webhook signed with another token must be refused, got {status}"
        elsewhere = validator.compute_signature("https://elsewhere.example/voice", params)
        status, _ = post(url, params, elsewhere)
        assert status == 403, f"a signature over another URL must be refused, got {status}"

        status, twiml = post(url, params, signature)
        assert status == 200, f"the signed webhook is answered: {status} {twiml}"
        ours = ET.fromstring(twiml)
        stream = ours.find("./Connect/Stream")
        assert stream is not None, twiml
        stream_url = stream.get("url")
        assert stream_url.startswith(f"ws://{addr}/telephony/twilio/stream/"), stream_url
        assert "?" not in stream_url, "Twilio's stream URLs take no query string"

        expected = VoiceResponse()
        connect = Connect()
        built = Stream(url=stream_url)
        for name, value in (("From", "+15550100"), ("To", "+15550199"), ("campaign", "spring")):
            built.parameter(name=name, value=value)
        connect.append(built)
        expected.append(connect)
        theirs = ET.fromstring(str(expected))
        assert tree(ours) == tree(theirs), f"\n ours   {tree(ours)}\n theirs {tree(theirs)}"
        print("twilio interop: signatures checked, TwiML identical to the twilio package's")
    finally:
        proc.terminate()
        proc.wait(timeout=TIMEOUT)


if __name__ == "__main__":
    main()
