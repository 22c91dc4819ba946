package query

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strconv"
	"strings"
)

// Signed report links. A report is opened from a chat message, in a browser
// that cannot send a bearer token, so the alert carries a link that grants
// read access to one incident's report and plots until it expires:
//
//	/incidents/{id}/report?exp=<unix seconds>&sig=<hex HMAC-SHA256(key, "report\n<id>\n<exp>")>
//
// The key is derived from the bearer token, so rotating the token revokes
// every link. Without a token (AllowNoAuth) links carry no signature.

func (s *Server) linkSig(id string, exp int64) string {
	m := hmac.New(sha256.New, s.linkKey)
	m.Write([]byte("report\n" + id + "\n" + strconv.FormatInt(exp, 10)))
	return hex.EncodeToString(m.Sum(nil))
}

// ReportURL is the link to an incident's report, signed when the server has
// a token and absolute when Config.BaseURL is set. The alert dispatcher puts
// it in every message.
func (s *Server) ReportURL(incidentID string) string {
	p := strings.TrimSuffix(s.cfg.BaseURL, "/") + "/incidents/" + url.PathEscape(incidentID) + "/report"
	if s.linkKey == nil {
		return p
	}
	exp := s.now().Add(s.cfg.ReportLinkTTL).Unix()
	return p + "?exp=" + strconv.FormatInt(exp, 10) + "&sig=" + s.linkSig(incidentID, exp)
}

// linkQuery is the exp/sig query of the request, for links to plots.
func linkQuery(exp, sig string) string {
	if sig == "" {
		return ""
	}
	return "?exp=" + url.QueryEscape(exp) + "&sig=" + url.QueryEscape(sig)
}

func (s *Server) checkLink(id, expText, sig string) error {
	if s.linkKey == nil {
		return nil
	}
	exp, err := strconv.ParseInt(expText, 10, 64)
	if err != nil {
		return probUnauthorized.new("the report link is malformed")
	}
	want := s.linkSig(id, exp)
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return probUnauthorized.new("the report link signature is not valid")
	}
	if s.now().Unix() > exp {
		return probUnauthorized.new("the report link expired; ask for a new one")
	}
	return nil
}
