"""The DSA Transparency Database's statement of reasons: its field names, the values each may take, their limits.

A statement of reasons is what an online platform submits to the EU's DSA Transparency Database (Article 24(5) of
Regulation 2022/2065) for each moderation decision: `POST /api/v1/statement` (one) or `POST /api/v1/statements`
(`{"statements": [...]}`, up to 100 per call). The names and values here are the database's own, taken from:

- the API documentation, https://transparency.dsa.ec.europa.eu/page/api-documentation ("Statement Attributes":
  every field, which are required, the date format `YYYY-MM-DD`, the character limits, the `puid` alphabet);
- the explanation of the attributes,
  https://transparency.dsa.ec.europa.eu/page/additional-explanation-for-statement-attributes (what `content_date`,
  `application_date`, `automated_detection` and `automated_decision` mean);
- the database's source, https://github.com/digital-services-act/transparency-database (commit 69e80a0bc8eb,
  2026-06-24), which that page is rendered from: the value lists are the keys of `app/Models/Statement.php`
  (DECISION_VISIBILITIES, DECISION_MONETARIES, DECISION_PROVISIONS, DECISION_ACCOUNTS, ACCOUNT_TYPES,
  DECISION_GROUNDS, CONTENT_TYPES, STATEMENT_CATEGORIES, KEYWORDS, SOURCE_TYPES, AUTOMATED_DETECTIONS,
  AUTOMATED_DECISIONS, INCOMPATIBLE_CONTENT_ILLEGALS), the rules those of `app/Http/Requests/StatementStoreRequest.php`,
  the country codes `app/Services/EuropeanCountriesService.php`, the languages the keys of ALL_LANGUAGES in
  `app/Services/EuropeanLanguagesService.php`. The schema is the one in force since 1 July 2025 (the page's changelog).

Not covered (the export never writes them): `content_id` (an EAN-13 per item) and the `end_date_*` fields (blank
means indefinite). Knows nothing of decisions, logs or files: names and values only.
"""
from __future__ import annotations

DATABASE_API_URL = "https://transparency.dsa.ec.europa.eu/page/api-documentation"

DECISION_VISIBILITIES = (
    "DECISION_VISIBILITY_CONTENT_REMOVED", "DECISION_VISIBILITY_CONTENT_DISABLED",
    "DECISION_VISIBILITY_CONTENT_DEMOTED", "DECISION_VISIBILITY_CONTENT_AGE_RESTRICTED",
    "DECISION_VISIBILITY_CONTENT_INTERACTION_RESTRICTED", "DECISION_VISIBILITY_CONTENT_LABELLED",
    "DECISION_VISIBILITY_OTHER")
DECISION_MONETARIES = ("DECISION_MONETARY_SUSPENSION", "DECISION_MONETARY_TERMINATION", "DECISION_MONETARY_OTHER")
DECISION_PROVISIONS = ("DECISION_PROVISION_PARTIAL_SUSPENSION", "DECISION_PROVISION_TOTAL_SUSPENSION",
                       "DECISION_PROVISION_PARTIAL_TERMINATION", "DECISION_PROVISION_TOTAL_TERMINATION")
DECISION_ACCOUNTS = ("DECISION_ACCOUNT_SUSPENDED", "DECISION_ACCOUNT_TERMINATED")
ACCOUNT_TYPES = ("ACCOUNT_TYPE_BUSINESS", "ACCOUNT_TYPE_PRIVATE")
DECISION_GROUNDS = ("DECISION_GROUND_ILLEGAL_CONTENT", "DECISION_GROUND_INCOMPATIBLE_CONTENT")
CONTENT_TYPES = ("CONTENT_TYPE_APP", "CONTENT_TYPE_AUDIO", "CONTENT_TYPE_IMAGE", "CONTENT_TYPE_PRODUCT",
                 "CONTENT_TYPE_SYNTHETIC_MEDIA", "CONTENT_TYPE_TEXT", "CONTENT_TYPE_VIDEO", "CONTENT_TYPE_OTHER")
STATEMENT_CATEGORIES = (
    "STATEMENT_CATEGORY_ANIMAL_WELFARE", "STATEMENT_CATEGORY_CONSUMER_INFORMATION",
    "STATEMENT_CATEGORY_CYBER_VIOLENCE", "STATEMENT_CATEGORY_CYBER_VIOLENCE_AGAINST_WOMEN",
    "STATEMENT_CATEGORY_DATA_PROTECTION_AND_PRIVACY_VIOLATIONS", "STATEMENT_CATEGORY_ILLEGAL_OR_HARMFUL_SPEECH",
    "STATEMENT_CATEGORY_INTELLECTUAL_PROPERTY_INFRINGEMENTS",
    "STATEMENT_CATEGORY_NEGATIVE_EFFECTS_ON_CIVIC_DISCOURSE_OR_ELECTIONS", "STATEMENT_CATEGORY_NOT_SPECIFIED_NOTICE",
    "STATEMENT_CATEGORY_OTHER_VIOLATION_TC", "STATEMENT_CATEGORY_PROTECTION_OF_MINORS",
    "STATEMENT_CATEGORY_RISK_FOR_PUBLIC_SECURITY", "STATEMENT_CATEGORY_SCAMS_AND_FRAUD",
    "STATEMENT_CATEGORY_SELF_HARM", "STATEMENT_CATEGORY_UNSAFE_AND_PROHIBITED_PRODUCTS",
    "STATEMENT_CATEGORY_VIOLENCE")
KEYWORDS = (
    "KEYWORD_ADULT_SEXUAL_MATERIAL", "KEYWORD_AGE_SPECIFIC_RESTRICTIONS", "KEYWORD_AGE_SPECIFIC_RESTRICTIONS_MINORS",
    "KEYWORD_ANIMAL_HARM", "KEYWORD_BIOMETRIC_DATA_BREACH", "KEYWORD_BULLYING_AGAINST_GIRLS",
    "KEYWORD_CHILD_SEXUAL_ABUSE_MATERIAL", "KEYWORD_CHILD_SEXUAL_ABUSE_MATERIAL_DEEPFAKE",
    "KEYWORD_CONTENT_PROMOTING_EATING_DISORDERS", "KEYWORD_COORDINATED_HARM", "KEYWORD_COPYRIGHT_INFRINGEMENT",
    "KEYWORD_CYBER_BULLYING_INTIMIDATION", "KEYWORD_CYBER_HARASSMENT", "KEYWORD_CYBER_HARASSMENT_AGAINST_WOMEN",
    "KEYWORD_CYBER_INCITEMENT", "KEYWORD_CYBER_STALKING", "KEYWORD_CYBER_STALKING_AGAINST_WOMEN",
    "KEYWORD_DATA_FALSIFICATION", "KEYWORD_DEFAMATION", "KEYWORD_DESIGN_INFRINGEMENT", "KEYWORD_DISCRIMINATION",
    "KEYWORD_FEMALE_GENDERED_DISINFORMATION", "KEYWORD_GEOGRAPHIC_INDICATIONS_INFRINGEMENT",
    "KEYWORD_GEOGRAPHICAL_REQUIREMENTS", "KEYWORD_GOODS_SERVICES_NOT_PERMITTED",
    "KEYWORD_GROOMING_SEXUAL_ENTICEMENT_MINORS", "KEYWORD_HATE_SPEECH", "KEYWORD_HIDDEN_ADVERTISEMENT",
    "KEYWORD_HUMAN_EXPLOITATION", "KEYWORD_HUMAN_TRAFFICKING", "KEYWORD_ILLEGAL_ORGANIZATIONS",
    "KEYWORD_IMPERSONATION_ACCOUNT_HIJACKING", "KEYWORD_INAUTHENTIC_ACCOUNTS", "KEYWORD_INAUTHENTIC_LISTINGS",
    "KEYWORD_INAUTHENTIC_USER_REVIEWS", "KEYWORD_INCITEMENT_AGAINST_WOMEN", "KEYWORD_INCITEMENT_VIOLENCE_HATRED",
    "KEYWORD_INSUFFICIENT_INFORMATION_ON_TRADERS", "KEYWORD_LANGUAGE_REQUIREMENTS",
    "KEYWORD_MISINFORMATION_DISINFORMATION", "KEYWORD_MISLEADING_INFO_CONSUMER_RIGHTS",
    "KEYWORD_MISLEADING_INFO_GOODS_SERVICES", "KEYWORD_MISSING_PROCESSING_GROUND",
    "KEYWORD_NON_CONSENSUAL_IMAGE_SHARING", "KEYWORD_NON_CONSENSUAL_IMAGE_SHARING_AGAINST_WOMEN",
    "KEYWORD_NON_CONSENSUAL_MATERIAL_DEEPFAKE", "KEYWORD_NON_CONSENSUAL_MATERIAL_DEEPFAKE_AGAINST_WOMEN",
    "KEYWORD_NONCOMPLIANCE_PRICING", "KEYWORD_NUDITY", "KEYWORD_PATENT_INFRINGEMENT", "KEYWORD_PHISHING",
    "KEYWORD_PROHIBITED_PRODUCTS", "KEYWORD_PYRAMID_SCHEMES", "KEYWORD_RIGHT_TO_BE_FORGOTTEN",
    "KEYWORD_RISK_ENVIRONMENTAL_DAMAGE", "KEYWORD_RISK_PUBLIC_HEALTH", "KEYWORD_SELF_MUTILATION", "KEYWORD_STALKING",
    "KEYWORD_SUICIDE", "KEYWORD_TERRORIST_CONTENT", "KEYWORD_TRADE_SECRET_INFRINGEMENT",
    "KEYWORD_TRADEMARK_INFRINGEMENT", "KEYWORD_TRAFFICKING_WOMEN_GIRLS", "KEYWORD_UNLAWFUL_SALE_ANIMALS",
    "KEYWORD_UNSAFE_CHALLENGES", "KEYWORD_UNSAFE_PRODUCTS", "KEYWORD_VIOLATION_EU_LAW",
    "KEYWORD_VIOLATION_NATIONAL_LAW", "KEYWORD_OTHER")
SOURCE_TYPES = ("SOURCE_ARTICLE_16", "SOURCE_TRUSTED_FLAGGER", "SOURCE_TYPE_OTHER_NOTIFICATION", "SOURCE_VOLUNTARY")
YES_NO = ("Yes", "No")                                   # automated_detection, incompatible_content_illegal
AUTOMATED_DECISIONS = ("AUTOMATED_DECISION_FULLY", "AUTOMATED_DECISION_PARTIALLY",
                       "AUTOMATED_DECISION_NOT_AUTOMATED")

EU_COUNTRY_CODES = (
    "AT", "BE", "BG", "CY", "CZ", "DE", "DK", "EE", "ES", "FI", "FR", "GR", "HR", "HU", "IE", "IT", "LT", "LU", "LV",
    "MT", "NL", "PL", "PT", "RO", "SE", "SI", "SK")
EEA_COUNTRY_CODES = tuple(sorted((*EU_COUNTRY_CODES, "IS", "LI", "NO")))
COUNTRY_CODES = EEA_COUNTRY_CODES                        # territorial_scope: any of these (EU/EEA), as a list
LANGUAGE_CODES = (
    "AB", "AA", "AF", "AK", "SQ", "AM", "AR", "AN", "HY", "AS", "AV", "AE", "AY", "AZ", "BM", "BA", "EU", "BE", "BN",
    "BH", "BI", "BS", "BR", "BG", "MY", "CA", "KM", "CH", "CE", "NY", "ZH", "CU", "CV", "KW", "CO", "CR", "HR", "CS",
    "DA", "DV", "NL", "DZ", "EN", "EO", "ET", "EE", "FO", "FJ", "FI", "FR", "FF", "GD", "GL", "LG", "KA", "DE", "KI",
    "EL", "KL", "GN", "GU", "HT", "HA", "HE", "HZ", "HI", "HO", "HU", "IS", "IO", "IG", "ID", "IA", "IE", "IU", "IK",
    "GA", "IT", "JA", "JV", "KN", "KR", "KS", "KK", "RW", "KV", "KG", "KO", "KJ", "KU", "KY", "LO", "LA", "LV", "LB",
    "LI", "LN", "LT", "LU", "MK", "MG", "MS", "ML", "MT", "GV", "MI", "MR", "MH", "RO", "MN", "NA", "NV", "ND", "NG",
    "NE", "SE", "NO", "NB", "NN", "II", "OC", "OJ", "OR", "OM", "OS", "PI", "PA", "PS", "FA", "PL", "PT", "QU", "RM",
    "RN", "RU", "SM", "SG", "SA", "SC", "SR", "SN", "SD", "SI", "SK", "SL", "SO", "ST", "NR", "ES", "SU", "SW", "SS",
    "SV", "TL", "TY", "TG", "TA", "TT", "TE", "TH", "BO", "TI", "TO", "TS", "TN", "TR", "TK", "TW", "UG", "UK", "UR",
    "UZ", "VE", "VI", "VO", "WA", "CY", "FY", "WO", "XH", "YI", "YO", "ZA", "ZU")

# free-text fields and their limits in characters (StatementStoreRequest: max:N)
TEXT_LIMITS_CHARS = {
    "decision_visibility_other": 500, "decision_monetary_other": 500, "decision_ground_reference_url": 500,
    "illegal_content_legal_ground": 500, "illegal_content_explanation": 2000, "incompatible_content_ground": 500,
    "incompatible_content_explanation": 2000, "content_type_other": 500, "category_specification_other": 500,
    "decision_facts": 5000, "source_identity": 500, "puid": 500,
}
PUID_PATTERN = r"[a-zA-Z0-9_-]{1,500}"                   # letters, digits, hyphens and underscores only
APPLICATION_DATE_RANGE = ("2020-01-01", "2038-01-01")    # YYYY-MM-DD, inclusive

# the order fields appear in the API documentation's example, for statements that read the same way
FIELD_ORDER = (
    "decision_visibility", "decision_visibility_other", "decision_monetary", "decision_monetary_other",
    "decision_provision", "decision_account", "account_type", "decision_ground", "decision_ground_reference_url",
    "illegal_content_legal_ground", "illegal_content_explanation", "incompatible_content_ground",
    "incompatible_content_explanation", "incompatible_content_illegal", "content_type", "content_type_other",
    "category", "category_addition", "category_specification", "category_specification_other", "territorial_scope",
    "content_language", "content_date", "application_date", "decision_facts", "source_type", "source_identity",
    "automated_detection", "automated_decision", "puid")
